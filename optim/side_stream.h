// SideStream: a second CUDA stream for host↔device copies that must not queue behind the compute
// stream's kernels (optimizer offload), and marks on it the host can poll or wait for. On the CPU it runs
// the work at once, joins trivially and every mark is reached.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>

namespace zest {

class SideStream {
 public:
  // A point on the side stream: everything queued there before it. A default mark is reached.
  class Mark {
   public:
    bool is_reached() const;  // without waiting
    void wait_host() const;   // the host waits until it is reached

   private:
    friend class SideStream;
    struct Event;  // a CUDA event (optim/side_stream_cuda.cpp); none on the CPU
    std::shared_ptr<Event> event_;
  };

  explicit SideStream(const torch::Device& device);
  ~SideStream();
  SideStream(const SideStream&) = delete;
  SideStream& operator=(const SideStream&) = delete;

  // Enqueues `work` on the side stream (it is the current stream while `work` runs), ordered after
  // everything queued on the current stream so far.
  void run(const std::function<void()>& work);
  // The current stream waits for everything queued on the side stream so far (no host wait).
  void join();
  // The point after everything queued on the side stream so far.
  Mark mark();

 private:
  struct Impl;  // the CUDA stream (optim/side_stream_cuda.cpp); null on the CPU
  std::unique_ptr<Impl> impl_;
};

}  // namespace zest
