// Sharded optimizers over flat fp32 buffers. The engine hands over, once, one segment per unit of the
// rank's concatenated shard (master slice, gradient slice, the compute-dtype parameter slice the update
// writes back, and which ranges get weight decay); the optimizer owns its state as flat buffers of the
// same length, so checkpoints save a handful of large tensors. Each step() reads that step's numbers
// (learning rate, gradient multiplier, skip flag, bias corrections) from the engine's StepScalars on
// the device, so a GPU update never waits for the host.
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

// One unit's part of the rank's shard. All views of persistent engine buffers.
struct OptimSegment {
  int64_t offset = 0;                      // where the segment starts in the flat state buffers
  torch::Tensor master;                    // fp32 [numel], view into the master shard
  torch::Tensor grad;                      // [numel], the gradient (reduce dtype; upcast on the fly)
  torch::Tensor param;                     // [numel], compute dtype: receives the updated values
  std::vector<ElementRange> decay_ranges;  // ranges that get weight decay, relative to the segment
};

// A run of a segment's elements that all get weight decay, or all do not.
struct DecayRun {
  ElementRange range;  // relative to the segment
  bool decay;
};
// The segment's elements, in order, as alternating runs (decay_ranges and the gaps around them).
std::vector<DecayRun> decay_runs(const OptimSegment& segment);

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // One update of every segment with this step's scalars; a skipped step (non-finite gradients)
  // changes nothing. Also writes the updated values, cast, into each segment's `param`.
  virtual void step() = 0;
  // Bytes of optimizer state per parameter element (AdamW: 8, SGD with momentum: 4).
  virtual int64_t state_bytes_per_element() const = 0;
  // State tensors by name ("exp_avg", "exp_avg_sq" / "momentum"), each [numel] fp32, for checkpoints.
  virtual std::vector<std::pair<std::string, torch::Tensor>> state_tensors() const = 0;
  // Updates applied (Adam's bias-correction t): kept in the step scalars, so reading it is a device
  // sync on GPU (checkpoints only).
  int64_t step_count() const;
  void set_step_count(int64_t count);
  const OptimConfig& config() const { return config_; }
  const std::vector<OptimSegment>& segments() const { return segments_; }

 protected:
  Optimizer(const OptimConfig& config, std::vector<OptimSegment> segments, torch::Tensor step_scalars)
      : config_(config), segments_(std::move(segments)), scalars_(std::move(step_scalars)) {}
  OptimConfig config_;
  std::vector<OptimSegment> segments_;
  torch::Tensor scalars_;  // float64 [kStepScalarCount] (engine/step_scalars.h), on the engine's device
};

// Builds the configured optimizer with zeroed state for `numel` elements on the segments' device: the
// CPU implementation (ATen ops per segment) or, on CUDA, the fused kernels (one pass per step).
std::unique_ptr<Optimizer> make_optimizer(const OptimConfig& config, std::vector<OptimSegment> segments,
                                          int64_t numel, torch::Tensor step_scalars);
// State bytes per element for a configuration without building it (memory estimates).
int64_t optimizer_state_bytes_per_element(const OptimConfig& config);

}  // namespace zest
