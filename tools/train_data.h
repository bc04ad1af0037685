// TrainData: the data side of `zest train`: opens the run's dataset for this rank (checking it fits the
// model, and that a loader's worth of batches fits in memory), yields loader batches under the names
// the family's training_loss expects, and saves/restores the data position with checkpoints as a
// world-independent global position, so a run can resume on another number of ranks.
#pragma once

#include "comm/communicator.h"
#include "data/dataset.h"
#include "models/model_resolve.h"
#include "tools/memory_budget.h"
#include "tools/run_config.h"

#include <nlohmann/json.hpp>

#include <memory>
#include <string>

namespace zest {

class TrainData {
 public:
  TrainData(const RunConfig& config, const ResolvedModel& model, const Communicator& comm);
  ~TrainData();
  TrainData(const TrainData&) = delete;
  TrainData& operator=(const TrainData&) = delete;

  TensorMap next();
  // {"epoch": E, "consumed": C, "dataset_size": N, "dataset_fingerprint": F}: C positions of epoch E's
  // global order are read, of the dataset whose Dataset::fingerprint() is F (compared on resume when present).
  nlohmann::json state() const;
  // Reads state() as saved by any world size, and the older per-rank form {"epoch", "index"} (then
  // `saved_world_size` re-splits it). Errors name the checkpoint's "extra.data" and what is wrong.
  void load_state(const nlohmann::json& state, int saved_world_size);

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
