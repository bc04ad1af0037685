// EngineState: everything a checkpoint reads from a training engine and restores into it (the units'
// layouts and this rank's part of each, the named flat shards, the step counters, each component's
// configuration), and StatefulEngine, the one contract checkpoint/ sees an engine through (torchtitan's
// Stateful, FSDP2's sharded state dict).
#pragma once

#include "core/element_span.h"
#include "engine/engine_config.h"
#include "engine/loss_scaler.h"
#include "engine/unit_layout.h"
#include "optim/ema.h"
#include "optim/optim_config.h"

#include <torch/torch.h>

#include <optional>
#include <string>
#include <vector>

namespace zest {

class Communicator;  // comm/communicator.h

inline constexpr const char* kMasterShard = "master";  // the fp32 master weights
inline constexpr const char* kEmaShard = "ema";        // the EMA of the master weights, when the run keeps one

// One unit as this rank holds it.
struct UnitShardLayout {
  UnitLayout layout;    // laid out for the engine's world size
  ElementSpan owned;    // the unit's elements this rank holds: its slice, or the whole unit at stage 0
  ElementSpan in_flat;  // where those elements sit in each of the rank's flat shards
};

// One of the rank's flat fp32 shards [Σ owned numel], units in order: the master, an optimizer state
// (named by the optimizer, e.g. "exp_avg"), the EMA.
struct NamedShard {
  std::string name;
  torch::Tensor flat;
};

struct StepCounters {
  int64_t step = 0;            // step() calls, skipped ones included
  int64_t optimizer_step = 0;  // the optimizer's own update count (Adam's bias correction)
  int64_t skipped_total = 0;   // steps skipped for non-finite gradients
  double lr = 0.0;             // learning rate of the next update
  bool loss_scale_enabled = false;
  LossScalerState loss_scaler;
};

struct ComponentConfigs {
  EngineConfig engine;
  OptimConfig optimizer;
  SchedulerConfig scheduler;
  std::optional<EmaConfig> ema;  // exactly when the engine keeps an EMA
};

// The same configurations as TOML tables, each written by its type's own to_toml (the one serialiser of
// each), so that two of them compare key by key (checkpoint/config_diff.h).
struct ComponentTomls {
  std::string engine;     // [engine] and its sub-tables
  std::string optimizer;  // [optimizer]
  std::string scheduler;  // [scheduler]
  std::string ema;        // [ema]; "" without an EMA
};
ComponentTomls to_toml_texts(const ComponentConfigs& configs);

struct EngineState {
  int rank = 0;
  int world_size = 1;
  int stage = 0;
  std::vector<UnitShardLayout> units;
  std::vector<NamedShard> shards;  // kMasterShard, the optimizer's states in its order, kEmaShard when kept
  StepCounters counters;
  ComponentConfigs configs;

  ComponentTomls tomls() const { return to_toml_texts(configs); }
  std::vector<std::string> shard_names() const;
  const NamedShard* find_shard(const std::string& name) const;  // null when there is none of that name
  const torch::Tensor& shard(const std::string& name) const;    // refused, listing the names there are
  int64_t flat_numel() const;                                   // of every flat shard: Σ owned numel
};

// Refuses, naming the first unit that differs, a state whose units are not laid out and held like
// `expected`'s (another model, world size, rank or stage). `what` starts the message.
void check_same_layout(const EngineState& expected, const EngineState& other, const std::string& what);

// What checkpoints need of an engine: its state, a way to replace it, and the ranks it runs with.
class StatefulEngine {
 public:
  // This rank's state. The shards are views of the live buffers (write them out before the next step);
  // the counters are read from the device (a wait on a GPU).
  virtual EngineState state() = 0;
  // Copies `loaded`'s shards into the live buffers, restores the counters and the loss scaler and
  // refreshes the compute-dtype parameters from the master. `loaded` must have this engine's layout
  // (check_same_layout), the master and every optimizer state; without an EMA shard an engine that keeps
  // one restarts it from the loaded master, and an EMA shard this engine does not keep is ignored.
  // Refused with the engine untouched otherwise. Configurations are not changed: the run's apply.
  virtual void load_state(const EngineState& loaded) = 0;
  virtual Communicator& comm() const = 0;

 protected:
  ~StatefulEngine() = default;
};

}  // namespace zest
