// Sharded optimizers over flat fp32 buffers. The engine hands over, once, one segment per unit of the
// rank's concatenated shard (master slice, gradient slice, the compute-dtype parameter slice the update
// writes back, and which ranges get weight decay); the optimizer owns its state as flat buffers of the
// same length, so checkpoints save a handful of large tensors. Each step() reads that step's numbers
// (learning rate, gradient multiplier, skip flag, bias corrections) from the engine's StepScalars on
// the device, so a GPU update never waits for the host.
#pragma once

#include "core/element_span.h"
#include "optim/optim_config.h"
#include "optim/optimizer_spec.h"

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace zest {

// The optimizer's view of one unit's owned part of the rank's shard. All views of persistent engine buffers.
struct OptimSegment {
  ElementSpan in_flat;                    // the owned part's place in the flat state buffers
  torch::Tensor master;                   // fp32 [numel], view into the master shard
  torch::Tensor grad;                     // [numel], the gradient (reduce dtype; upcast on the fly)
  // [numel], compute dtype: receives the updated values. Undefined where no parameter copy is kept at rest
  // (stage 3 without offload: gathers cast the master).
  torch::Tensor param;
  std::vector<ElementSpan> decay_spans;   // spans that get weight decay, relative to the segment
};

// A run of a segment's elements that all get weight decay, or all do not.
struct DecayRun {
  ElementSpan span;  // relative to the segment
  bool decay;
};
// The segment's elements, in order, as alternating runs (decay_spans and the gaps around them).
std::vector<DecayRun> decay_runs(const OptimSegment& segment);

// The paths that run the configured update rule (optim/optimizers.h) over the segments: on the CPU,
// fused on CUDA, or offloaded to the host. The state tensors are the rule's, named by it.
class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // One update of every segment with this step's scalars; a skipped step (non-finite gradients)
  // changes nothing. Also writes the updated values, cast, into each segment's `param`.
  void step() { step_segments(0, segments_.size()); }
  // The same update of segments [first, end) only ([engine] optimizer_in_backward: one bucket's units as
  // soon as their gradients are reduced); the scalars' skip flag then speaks for these segments.
  virtual void step_segments(size_t first, size_t end) = 0;
  // Bytes of optimizer state per parameter element (AdamW: 8, SGD with momentum: 4, Lion: 4).
  int64_t state_bytes_per_element() const { return optimizer_state_bytes_per_element(config_); }
  // State tensors by the rule's names ("exp_avg", "exp_avg_sq" / "momentum"), each [numel] fp32, for
  // checkpoints; every path uses the same names, so checkpoints move between them.
  std::vector<std::pair<std::string, torch::Tensor>> state_tensors() const;
  // Updates applied (Adam's bias-correction t): kept in the step scalars, so reading it is a device
  // sync on GPU (checkpoints only).
  int64_t step_count() const;
  void set_step_count(int64_t count);
  const OptimConfig& config() const { return config_; }
  const std::vector<OptimSegment>& segments() const { return segments_; }

 protected:
  // Zeroed state of the rule for `numel` elements, each fp32 with `state_options`' device and memory.
  Optimizer(const OptimConfig& config, std::vector<OptimSegment> segments, torch::Tensor step_scalars,
            int64_t numel, const torch::TensorOptions& state_options);
  // Pointer to state tensor i at element `at`, or null past the rule's states (HostRange / kernel slots).
  float* state_at(size_t i, int64_t at) const;
  OptimConfig config_;
  OptimHyper hyper_;  // config_ in fp32, as the update computes
  std::vector<OptimSegment> segments_;
  torch::Tensor scalars_;  // float64 [kStepScalarCount] (engine/step_scalars.h), on the engine's device
  std::vector<torch::Tensor> states_;  // the rule's, in optimizer_spec(config_.name).states order
};

// Builds the configured optimizer with zeroed state for `numel` elements on the segments' device: the
// CPU implementation (the host pass per segment) or, on CUDA, the fused kernel (one pass per step).
std::unique_ptr<Optimizer> make_optimizer(const OptimConfig& config, std::vector<OptimSegment> segments,
                                          int64_t numel, torch::Tensor step_scalars);

}  // namespace zest
