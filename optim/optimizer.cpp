// Optimizer base: the step counter kept in the step scalars, and the factory choosing the CPU or the
// fused CUDA implementation by the segments' device.
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
  for (const auto& r : segment.decay_ranges) {
    if (r.begin > at) runs.push_back({{at, r.begin}, false});
    runs.push_back({r, true});
    at = r.end;
  }
  const int64_t n = segment.master.numel();
  if (at < n) runs.push_back({{at, n}, false});
  return runs;
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

int64_t optimizer_state_bytes_per_element(const OptimConfig& config) {
  if (config.name == OptimizerKind::adamw) return 8;
  return config.momentum != 0.0 ? 4 : 0;
}

}  // namespace zest
