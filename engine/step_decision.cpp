// The step decisions on the scalars' device (see step_decision.h).
#include "engine/step_decision.h"

#include "core/check.h"
#include "core/compat.h"

#ifdef ZEST_WITH_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

namespace zest {

void run_step_decision(StepDecision decision, const StepRules& rules, const torch::Tensor& scalars,
                       const torch::Tensor& param_sumsq) {
  ZEST_CHECK(scalars.scalar_type() == torch::kFloat64 && scalars.numel() == kStepScalarCount &&
                 param_sumsq.scalar_type() == torch::kFloat64 && scalars.device() == param_sumsq.device(),
             "run_step_decision: float64 scalars and sums of squares on one device expected");
  auto* s = static_cast<double*>(compat::mutable_data(scalars));
  const auto* sumsq = static_cast<const double*>(compat::const_data(param_sumsq));
  if (scalars.is_cpu()) {
    apply_step_decision(decision, rules, *reinterpret_cast<StepScalars*>(s), sumsq, param_sumsq.numel());
    return;
  }
#ifdef ZEST_WITH_CUDA
  launch_step_decision(decision, rules, s, sumsq, param_sumsq.numel(), c10::cuda::getCurrentCUDAStream().stream());
#else
  ZEST_FAIL("run_step_decision: scalars on ", scalars.device(), " but this build has no CUDA");
#endif
}

}  // namespace zest
