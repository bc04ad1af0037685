// SideStream: a second CUDA stream for host↔device copies that must not queue behind the compute
// stream's kernels (optimizer offload). On the CPU it runs the work at once and joins trivially.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>

namespace zest {

class SideStream {
 public:
  explicit SideStream(const torch::Device& device);
  ~SideStream();
  SideStream(const SideStream&) = delete;
  SideStream& operator=(const SideStream&) = delete;

  // Enqueues `work` on the side stream (it is the current stream while `work` runs), ordered after
  // everything queued on the current stream so far.
  void run(const std::function<void()>& work);
  // The current stream waits for everything queued on the side stream so far (no host wait).
  void join();

 private:
  struct Impl;  // the CUDA stream (optim/side_stream_cuda.cpp); null on the CPU
  std::unique_ptr<Impl> impl_;
};

}  // namespace zest
