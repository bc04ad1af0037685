// AdamW, with exactly PyTorch's update rule (ε outside the square root, decoupled weight decay):
// p ← p·(1 − lr·wd); m ← m + (1−β1)(g − m); v ← β2·v + (1−β2)·g²; p ← p − lr/(1−β1^t) · m / (√v/√(1−β2^t) + ε).
#pragma once

#include "optim/update_rule.h"

#include <math.h>

namespace zest {

struct AdamW {
  using State = float;
  static constexpr const char* kName = "adamw";
  static constexpr const char* kStates[] = {"exp_avg", "exp_avg_sq"};
  static constexpr HyperKey kKeys[] = {{"betas", "Adam moment decay rates [beta1, beta2]"},
                                       {"eps", "Adam denominator epsilon"}};
  static constexpr double kDefaultBetas[2] = {0.9, 0.999};
  static constexpr int live_states(const OptimHyper&) { return 2; }

  ZEST_HOST_DEVICE static float update(const OptimHyper& h, const StepValues& s, float wd, float g, float p,
                                       float* state) {
    const float decay = 1.0f - s.lr * wd;
    float m = state[0];
    float v = state[1];
    m += (1.0f - h.beta1) * (g - m);
    v = h.beta2 * v + (1.0f - h.beta2) * g * g;
    const float denom = sqrtf(v) / s.bias_correction2_sqrt + h.eps;
    state[0] = m;
    state[1] = v;
    return p * decay - s.step_size * m / denom;
  }
};

}  // namespace zest
