// Dynamic loss scaling for fp16 (and a fixed scale of 1 otherwise): halve on overflow (after
// `hysteresis` overflows), double after `window` clean steps, never below `min`; what happens when
// gradients still overflow at the floor is the config's at_min choice (warn and keep skipping, or stop).
#pragma once

#include "engine/engine_config.h"

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
  // enabled = false gives a constant scale of 1 that never changes (bf16/fp32).
  LossScaler(const LossScaleConfig& config, bool enabled);

  double scale() const { return state_.scale; }
  bool enabled() const { return enabled_; }
  // Records the outcome of a step. Returns true when the overflow happened at the floor scale (the
  // caller decides to warn or stop per at_min; see Engine::step).
  bool update(bool overflow);

  const LossScalerState& state() const { return state_; }
  void load_state(const LossScalerState& state) { state_ = state; }

 private:
  LossScaleConfig config_;
  bool enabled_;
  LossScalerState state_;
};

}  // namespace zest
