// The one-thread kernel that runs a step decision on the GPU (see step_decision.h).
#include "engine/step_scalars.h"

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

namespace zest {
namespace {

__global__ void step_decision_kernel(StepDecision decision, StepRules rules, double* scalars, const double* param_sumsq,
                                     int64_t num_params) {
  apply_step_decision(decision, rules, *reinterpret_cast<StepScalars*>(scalars), param_sumsq, num_params);
}

}  // namespace

void launch_step_decision(StepDecision decision, const StepRules& rules, double* scalars, const double* param_sumsq,
                          int64_t num_params, void* cuda_stream) {
  step_decision_kernel<<<1, 1, 0, static_cast<cudaStream_t>(cuda_stream)>>>(decision, rules, scalars, param_sumsq,
                                                                            num_params);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) {
    std::fprintf(stderr, "zest: error: step decision kernel launch failed: %s\n", cudaGetErrorString(err));
    std::abort();
  }
}

}  // namespace zest
