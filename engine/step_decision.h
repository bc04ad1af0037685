// Runs the step decisions of engine/step_scalars.h where the scalars live: directly on the CPU, as a
// one-thread kernel on the current CUDA stream on a GPU, so a decision never needs the host to read a value.
#pragma once

#include "engine/step_scalars.h"

#include <torch/torch.h>

namespace zest {

// scalars: float64 [kStepScalarCount]; param_sumsq: float64 [parameters] (or a bucket's part), same device.
void run_step_decision(StepDecision decision, const StepRules& rules, const torch::Tensor& scalars,
                       const torch::Tensor& param_sumsq);

#ifdef ZEST_WITH_CUDA
// engine/step_decision.cu
void launch_step_decision(StepDecision decision, const StepRules& rules, double* scalars, const double* param_sumsq,
                          int64_t num_params, void* cuda_stream);
#endif

}  // namespace zest
