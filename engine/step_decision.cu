// The one-thread kernel that runs decide_step on the GPU (see step_decision.h).
#include "engine/step_scalars.h"

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

namespace zest {
namespace {

__global__ void decide_step_kernel(StepRules rules, double* scalars, const double* param_sumsq, int64_t num_params) {
  decide_step(rules, *reinterpret_cast<StepScalars*>(scalars), param_sumsq, num_params);
}

}  // namespace

void launch_decide_step(const StepRules& rules, double* scalars, const double* param_sumsq, int64_t num_params,
                        void* cuda_stream) {
  decide_step_kernel<<<1, 1, 0, static_cast<cudaStream_t>(cuda_stream)>>>(rules, scalars, param_sumsq, num_params);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) {
    std::fprintf(stderr, "zest: error: decide_step kernel launch failed: %s\n", cudaGetErrorString(err));
    std::abort();
  }
}

}  // namespace zest
