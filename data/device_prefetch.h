// DevicePrefetcher: hands the step loop its batches already on the device. On a GPU, each batch (stacked
// by the loader's workers in page-locked memory) is copied on a side stream `depth` batches ahead, and
// next() makes the compute stream wait for its copy's event: the host never waits for a copy, and the
// step never waits for one that had a step's time to finish. On the CPU the batches pass through.
#pragma once

#include "data/dataset.h"

#include <torch/torch.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>

namespace zest {

// A host batch and what the step loop counts of it on the host (so the device copy need not be read).
struct HostBatch {
  Sample tensors;
  int64_t items = 0;
};

class DevicePrefetcher {
 public:
  using Source = std::function<HostBatch()>;
  // depth: batches copied ahead (at least 1). Nothing is drawn from `source` before the first next().
  DevicePrefetcher(Source source, const torch::Device& device, int depth = 2);
  ~DevicePrefetcher();
  DevicePrefetcher(const DevicePrefetcher&) = delete;
  DevicePrefetcher& operator=(const DevicePrefetcher&) = delete;

  // The next batch, on the device (usable on the current stream), and its host count.
  HostBatch next();
  // Batches drawn from the source but not yet returned by next() (a data position leaves them out).
  int64_t held() const;
  // Drops the batches drawn ahead (after the source's position was changed).
  void clear();
  // Host seconds the last next() spent waiting for the source (the loader not keeping up).
  double last_wait_s() const { return last_wait_s_; }

 private:
  // A batch whose copy is queued: on a GPU its device tensors and the copy's CUDA event (type-erased: only
  // device_prefetch_cuda.cpp knows CUDA), on the CPU the host batch and no event.
  struct InFlight {
    HostBatch batch;
    std::shared_ptr<void> copied;
  };
  InFlight start_copy(HostBatch host);
  HostBatch finish(InFlight& in_flight);  // the current stream waits for the copy

  Source source_;
  torch::Device device_;
  int depth_;
  std::shared_ptr<void> copy_stream_;  // the side stream on a GPU (device_prefetch_cuda.cpp); null on the CPU
  std::deque<InFlight> ahead_;
  double last_wait_s_ = 0.0;
};

}  // namespace zest
