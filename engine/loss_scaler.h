// LossScaler: the host's view of the fp16 dynamic loss scale. The scale and its counters live in the
// engine's StepScalars on the device (engine/step_scalars.h: advance_loss_scale halves on overflow after
// `hysteresis` overflows, doubles after `window` clean steps, never below `min`); reading or restoring
// them here is for checkpoints and reports (a device sync on GPU).
#pragma once

#include <torch/torch.h>

#include <cstdint>

namespace zest {

struct LossScalerState {
  double scale = 1.0;
  int64_t clean_steps = 0;     // consecutive clean steps since the last change
  int hysteresis_left = 1;     // overflows still tolerated before the next halving
  int64_t overflows = 0;       // total skipped steps due to overflow
};

class LossScaler {
 public:
  // scalars: the engine's float64 [kStepScalarCount] tensor. enabled = false: fp32/bf16, scale 1.
  LossScaler(torch::Tensor scalars, bool enabled) : scalars_(std::move(scalars)), enabled_(enabled) {}

  bool enabled() const { return enabled_; }
  double scale() const;
  LossScalerState state() const;
  void load_state(const LossScalerState& state);

 private:
  torch::Tensor scalars_;
  bool enabled_;
};

}  // namespace zest
