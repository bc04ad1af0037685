// Lion (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms"): the sign of an interpolation
// of momentum and gradient, decoupled weight decay, one state tensor:
// u ← sign(β1·m + (1−β1)·g); m ← β2·m + (1−β2)·g; p ← p·(1 − lr·wd) − lr·u.
#pragma once

#include "optim/update_rule.h"

namespace zest {

struct Lion {
  using State = float;
  static constexpr const char* kName = "lion";
  static constexpr const char* kStates[] = {"exp_avg"};
  static constexpr HyperKey kKeys[] = {{"betas", "Lion rates [beta1 of the update's interpolation, beta2 of the momentum]"}};
  static constexpr double kDefaultBetas[2] = {0.9, 0.99};
  static constexpr int live_states(const OptimHyper&) { return 1; }

  ZEST_HOST_DEVICE static float update(const OptimHyper& h, const StepValues& s, float wd, float g, float p,
                                       float* state) {
    const float m = state[0];
    const float c = h.beta1 * m + (1.0f - h.beta1) * g;
    const float u = c > 0.0f ? 1.0f : (c < 0.0f ? -1.0f : 0.0f);  // sign, 0 at 0
    state[0] = h.beta2 * m + (1.0f - h.beta2) * g;
    return p * (1.0f - s.lr * wd) - s.lr * u;
  }
};

}  // namespace zest
