// SGD with momentum, PyTorch's update rule (L2 weight decay added to the gradient):
// g ← g + wd·p; b ← μ·b + g (b = g on the first step); g ← g + μ·b (Nesterov) or b; p ← p − lr·g.
#pragma once

#include "optim/update_rule.h"

namespace zest {

struct Sgd {
  using State = float;
  static constexpr const char* kName = "sgd";
  static constexpr const char* kStates[] = {"momentum"};
  static constexpr HyperKey kKeys[] = {{"momentum", "SGD momentum"}, {"nesterov", "Nesterov momentum"}};
  static constexpr double kDefaultBetas[2] = {0.9, 0.999};  // unused
  // Without momentum the buffer is kept (checkpoints always hold it) but carries nothing.
  static constexpr int live_states(const OptimHyper& h) { return h.momentum != 0.0f ? 1 : 0; }

  ZEST_HOST_DEVICE static float update(const OptimHyper& h, const StepValues& s, float wd, float g, float p,
                                       float* state) {
    g = g + wd * p;
    if (h.momentum != 0.0f) {
      const float b = s.first_step ? g : h.momentum * state[0] + g;
      state[0] = b;
      g = h.nesterov ? g + h.momentum * b : b;
    }
    return p - s.lr * g;
  }
};

}  // namespace zest
