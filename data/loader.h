// DataLoader: batches of one rank, built ahead of time by background worker threads (bounded queue) so
// that a training step does not wait on disk in steady state. Deterministic whatever the thread timing,
// and its position is saved and restored exactly (a resumed run gets the same following batches).
#pragma once

#include "data/dataset.h"
#include "data/sampler.h"

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace zest {

struct LoaderOptions {
  int64_t batch_size = 1;    // samples per batch (per rank)
  int num_workers = 2;       // background threads; 0 = build each batch in next()
  int prefetch_batches = 0;  // batches built ahead at most; 0 = 2 per worker
  uint64_t seed = 0;         // per-sample randomness (crop windows): sample seed = f(seed, epoch, index)
  bool pin_memory = false;   // batches stacked into page-locked memory (for a GPU; needs a CUDA build)
};

// The sample stream is the sampler's, without end: a batch takes the next batch_size samples and may
// span an epoch boundary (every batch is full, so every step has the same size on every rank).
class DataLoader {
 public:
  DataLoader(std::shared_ptr<const Dataset> dataset, DistributedSampler sampler, const LoaderOptions& options);
  ~DataLoader();  // stops and joins the workers (discarding prefetched batches)
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // The next batch: each sample tensor stacked along a new leading dimension. A worker's error is
  // rethrown here, naming the sample and its shard file.
  Sample next();

  // Position of the batch next() returns next (not of what the workers have prefetched); `held_back`
  // batches already returned but not yet used (a device prefetch holds them) count as not returned.
  SamplerPosition state(int64_t held_back = 0) const;
  // Continues from `position` (a state() of a loader over the same dataset, world and options).
  void load_state(const SamplerPosition& position);
  // The same position as a world-independent GlobalPosition, and continuing from one saved at any
  // world size (see DistributedSampler::from_global).
  GlobalPosition global_state(int64_t held_back = 0) const;
  void load_global_state(const GlobalPosition& position);

  const Dataset& dataset() const { return *dataset_; }
  int64_t batch_size() const { return options_.batch_size; }
  int64_t samples_per_epoch() const { return sampler_.samples_per_rank(); }  // this rank's
  int64_t global_epoch_size() const { return sampler_.global_epoch_size(); }   // all ranks'

 private:
  struct Planned {
    int64_t number = 0;
    std::vector<int64_t> indices;
    std::vector<uint64_t> seeds;
  };
  struct Built {
    Sample batch;
    std::exception_ptr error;
  };

  Planned plan_locked();  // draws the next batch's samples from the sampler (mutex held)
  Built build(const Planned& planned) const;
  void worker_loop();
  void start_workers();
  void stop_workers();

  std::shared_ptr<const Dataset> dataset_;
  DistributedSampler sampler_;
  LoaderOptions options_;
  int capacity_ = 1;

  mutable std::mutex mutex_;
  std::condition_variable work_cv_;   // workers wait for room in the queue
  std::condition_variable ready_cv_;  // next() waits for its batch
  std::map<int64_t, Built> ready_;    // finished batches by number
  int64_t planned_ = 0;               // batches handed to workers since start_
  int64_t delivered_ = 0;             // batches returned by next() since start_
  SamplerPosition start_;             // sampler position when planned_ was 0
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace zest
