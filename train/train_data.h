// TrainData: the data side of `zest train`: opens the run's dataset for this rank (checking it fits the
// model, and that a loader's worth of batches fits in memory), yields loader batches under the names
// the family's training_loss expects, and saves/restores the data position with checkpoints as a
// world-independent global position, so a run can resume on another number of ranks.
#pragma once

#include "comm/communicator.h"
#include "data/dataset.h"
#include "data/device_prefetch.h"
#include "formats/json_field.h"
#include "models/model_resolve.h"
#include "train/memory_budget.h"
#include "train/run_config.h"

#include <nlohmann/json.hpp>

#include <memory>
#include <string>

namespace zest {

class TrainData {
 public:
  // `device`: where the step runs; on a GPU the loader stacks batches in page-locked memory and
  // next_for_step() copies them ahead on a side stream (data/device_prefetch.h).
  TrainData(const RunConfig& config, const ResolvedModel& model, const Communicator& comm,
            const torch::Device& device = torch::kCPU);
  ~TrainData();
  TrainData(const TrainData&) = delete;
  TrainData& operator=(const TrainData&) = delete;

  // The loader's next batch, on the host (not through the device prefetch; do not mix with next_for_step).
  TensorMap next();
  // The step loop's next batch: on the device, with its item count taken on the host, and how long the
  // loader kept the step waiting (last_wait_s).
  HostBatch next_for_step();
  double last_wait_s() const;
  // One sample as the loader yields it (unbatched), for the shapes the activation check needs.
  Sample first_sample() const;
  // {"epoch": E, "consumed": C, "dataset_size": N, "dataset_fingerprint": F}: C positions of epoch E's
  // global order are read, of the dataset whose Dataset::fingerprint() is F (compared on resume when present).
  nlohmann::json state() const;
  // Reads state() as saved by any world size, and the older per-rank form {"epoch", "index"} (then
  // `saved_world_size` re-splits it). Errors name the checkpoint's manifest, the field ("extra.data.epoch")
  // and what is wrong (formats/json_field.h).
  void load_state(const JsonField& state, int saved_world_size);
  void load_state(const nlohmann::json& state, int saved_world_size) {
    load_state(JsonField(state, "the data position"), saved_world_size);
  }

  // Throughput unit: "frames" (motion) or "latent px" (images), and how many a batch holds.
  std::string items_name() const;
  int64_t items_in(const TensorMap& batch) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Refuses a [data] setting whose input batches would take more than half of `budget` (the rest is for
// activations), before anything is allocated: the message says how much a sample and the loader's batches take and the largest
// data.batch_size (or, when one sample alone is too big, data.seq_len) that fits.
void check_inputs_fit(const DataConfig& data, const SampleBytes& sample, const MemoryBudget& budget);

// Batches the loader may hold at once with `num_workers` threads (prefetched, being built, in use).
int64_t loader_batches_held(int num_workers);

}  // namespace zest
