// Sharded optimizers over flat fp32 buffers: the engine hands over segments (one per unit) of the rank's
// concatenated master shard with their gradients; the optimizer owns its state as flat buffers of the
// same length, so checkpoints save a handful of large tensors.
#pragma once

#include "core/element_span.h"
#include "optim/optim_config.h"

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace zest {

// One unit's part of the rank's shard.
struct OptimSegment {
  int64_t offset = 0;                      // where the segment starts in the flat state buffers
  torch::Tensor master;                    // fp32 [numel], view into the master shard
  torch::Tensor grad;                      // [numel], any float dtype (upcast on the fly)
  std::vector<ElementRange> decay_ranges;  // ranges that get weight decay
};

// Per-step inputs computed by the engine.
struct StepHyper {
  double lr = 0.0;
  double grad_multiplier = 1.0;  // 1 / (loss scale · world size) · clip coefficient
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  virtual void step(const std::vector<OptimSegment>& segments, const StepHyper& hyper) = 0;
  // Bytes of optimizer state per parameter element (AdamW: 8, SGD with momentum: 4).
  virtual int64_t state_bytes_per_element() const = 0;
  // State tensors by name ("exp_avg", "exp_avg_sq" / "momentum"), each [numel] fp32, for checkpoints.
  virtual std::vector<std::pair<std::string, torch::Tensor>> state_tensors() const = 0;
  // Number of updates applied (Adam's bias-correction step).
  int64_t step_count() const { return step_count_; }
  void set_step_count(int64_t count) { step_count_ = count; }
  const OptimConfig& config() const { return config_; }

 protected:
  Optimizer(const OptimConfig& config) : config_(config) {}
  OptimConfig config_;
  int64_t step_count_ = 0;
};

// Builds the configured optimizer with state for `numel` elements (zeros).
std::unique_ptr<Optimizer> make_optimizer(const OptimConfig& config, int64_t numel);
// State bytes per element for a configuration without building it (memory estimates).
int64_t optimizer_state_bytes_per_element(const OptimConfig& config);

}  // namespace zest
