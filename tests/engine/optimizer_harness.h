// An optimizer on its own, outside the engine: flat master, gradient and parameter buffers cut into
// segments with weight-decay ranges, and the step scalars of update t — so a test can step any declared
// optimizer on any device with chosen numbers and compare it with a reference or another path.
#pragma once

#include "optim/optimizer.h"
#include "engine/step_scalars.h"

#include <torch/torch.h>

#include <cmath>
#include <memory>
#include <vector>

namespace zest::testing {

struct OptimizerBench {
  torch::Tensor master, grad, param, scalars;  // flat; scalars float64 [kStepScalarCount]
  std::unique_ptr<Optimizer> optimizer;
};

// Two segments of n1 and n2 elements (the second starts at n1); in each, the first half gets weight
// decay and the rest does not. Values: master ~ N(0, 1), gradients ~ N(0, 1) from `seed`.
inline OptimizerBench make_bench(const OptimConfig& config, int64_t n1, int64_t n2, torch::Device device,
                                 torch::Dtype grad_dtype = torch::kFloat32,
                                 torch::Dtype param_dtype = torch::kFloat32, int64_t seed = 1) {
  torch::manual_seed(seed);
  OptimizerBench b;
  const int64_t n = n1 + n2;
  b.master = torch::randn({n}).to(device);
  b.grad = torch::randn({n}).to(device, grad_dtype);
  b.param = b.master.to(param_dtype);
  b.scalars = torch::zeros({kStepScalarCount}, torch::kFloat64).to(device);
  std::vector<OptimSegment> segments;
  for (const auto& [offset, numel] : {std::pair<int64_t, int64_t>{0, n1}, {n1, n2}}) {
    OptimSegment s;
    s.in_flat = {offset, numel};
    s.master = b.master.narrow(0, offset, numel);
    s.grad = b.grad.narrow(0, offset, numel);
    s.param = b.param.narrow(0, offset, numel);
    s.decay_spans = {{0, numel / 2}};
    segments.push_back(s);
  }
  b.optimizer = make_optimizer(config, std::move(segments), n, b.scalars);
  return b;
}

// The step scalars of update t (1-based): learning rate, gradient multiplier and Adam's bias corrections.
inline void set_step(OptimizerBench& b, const OptimConfig& config, int64_t t, double lr, double multiplier) {
  StepScalars s;
  s.applied_steps = static_cast<double>(t);
  s.lr = lr;
  s.grad_multiplier = multiplier;
  s.bias_correction1 = 1.0 - std::pow(config.beta1, static_cast<double>(t));
  s.bias_correction2_sqrt = std::sqrt(1.0 - std::pow(config.beta2, static_cast<double>(t)));
  const auto host = torch::from_blob(&s, {kStepScalarCount}, torch::kFloat64);
  b.scalars.copy_(host);
}

}  // namespace zest::testing
