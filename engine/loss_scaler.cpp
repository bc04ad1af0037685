// LossScaler state machine (see loss_scaler.h).
#include "engine/loss_scaler.h"

#include <algorithm>

namespace zest {

LossScaler::LossScaler(const LossScaleConfig& config, bool enabled) : config_(config), enabled_(enabled) {
  state_.scale = enabled ? config.initial : 1.0;
  state_.hysteresis_left = std::max(1, config.hysteresis);
}

bool LossScaler::update(bool overflow) {
  if (!enabled_) return false;
  if (!overflow) {
    if (++state_.clean_steps >= config_.window) {
      state_.scale *= 2.0;
      state_.clean_steps = 0;
      state_.hysteresis_left = std::max(1, config_.hysteresis);
    }
    return false;
  }
  ++state_.overflows;
  state_.clean_steps = 0;
  const bool at_floor = state_.scale <= config_.min;
  if (--state_.hysteresis_left <= 0) {
    state_.scale = std::max(config_.min, state_.scale * 0.5);
    state_.hysteresis_left = std::max(1, config_.hysteresis);
  }
  return at_floor;
}

}  // namespace zest
