// Optimizer base: the rule's state tensors, the step counter kept in the step scalars, and the factory
// choosing the CPU or the fused CUDA implementation by the segments' device.
#include "optim/optimizer.h"

#include "core/check.h"
#include "engine/step_scalars.h"

namespace zest {

#ifdef ZEST_WITH_CUDA
// optim/fused_optimizer_cuda.cpp
std::unique_ptr<Optimizer> make_fused_cuda_optimizer(const OptimConfig& config, std::vector<OptimSegment> segments,
                                                     int64_t numel, torch::Tensor step_scalars);
#endif
// optim/cpu_optimizers.cpp
std::unique_ptr<Optimizer> make_cpu_optimizer(const OptimConfig& config, std::vector<OptimSegment> segments,
                                              int64_t numel, torch::Tensor step_scalars);

std::vector<DecayRun> decay_runs(const OptimSegment& segment) {
  std::vector<DecayRun> runs;
  int64_t at = 0;
  for (const ElementSpan& span : segment.decay_spans) {
    if (span.begin > at) runs.push_back({{at, span.begin - at}, false});
    runs.push_back({span, true});
    at = span.end();
  }
  const int64_t n = segment.master.numel();
  if (at < n) runs.push_back({{at, n - at}, false});
  return runs;
}

Optimizer::Optimizer(const OptimConfig& config, std::vector<OptimSegment> segments, torch::Tensor step_scalars,
                     int64_t numel, const torch::TensorOptions& state_options)
    : config_(config), hyper_(optim_hyper(config)), segments_(std::move(segments)), scalars_(std::move(step_scalars)) {
  for (size_t i = 0; i < optimizer_spec(config_.name).states.size(); ++i)
    states_.push_back(torch::zeros({numel}, state_options.dtype(torch::kFloat32)));
}

std::vector<std::pair<std::string, torch::Tensor>> Optimizer::state_tensors() const {
  const auto& names = optimizer_spec(config_.name).states;
  std::vector<std::pair<std::string, torch::Tensor>> named;
  for (size_t i = 0; i < names.size(); ++i) named.emplace_back(names[i], states_[i]);
  return named;
}

float* Optimizer::state_at(size_t i, int64_t at) const {
  return i < states_.size() ? states_[i].data_ptr<float>() + at : nullptr;
}

int64_t Optimizer::step_count() const {
  return static_cast<int64_t>(scalars_[kAppliedStepsIndex].item<double>());
}

void Optimizer::set_step_count(int64_t count) {
  torch::NoGradGuard no_grad;
  scalars_[kAppliedStepsIndex].fill_(static_cast<double>(count));
}

std::unique_ptr<Optimizer> make_optimizer(const OptimConfig& config, std::vector<OptimSegment> segments,
                                          int64_t numel, torch::Tensor step_scalars) {
  ZEST_CHECK(step_scalars.scalar_type() == torch::kFloat64 && step_scalars.numel() == kStepScalarCount,
             "make_optimizer: the step scalars must be float64 [", kStepScalarCount, "]");
#ifdef ZEST_WITH_CUDA
  if (step_scalars.is_cuda()) {
    return make_fused_cuda_optimizer(config, std::move(segments), numel, std::move(step_scalars));
  }
#endif
  return make_cpu_optimizer(config, std::move(segments), numel, std::move(step_scalars));
}

}  // namespace zest
