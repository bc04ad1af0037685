// TrainData: the data side of `zest train`: opens the run's dataset for this rank (checking it fits the
// model), yields loader batches under the names the family's training_loss expects, and saves/restores
// the loader position with checkpoints.
#pragma once

#include "comm/communicator.h"
#include "models/model_resolve.h"
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
  nlohmann::json state() const;
  void load_state(const nlohmann::json& state);

  // Throughput unit: "frames" (motion) or "latent px" (images), and how many a batch holds.
  std::string items_name() const;
  int64_t items_in(const TensorMap& batch) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace zest
