// The fused kernel of each update rule over the chunk table (see fused_optimizer.h). Memory-bound: per
// element of AdamW, 12 bytes of fp32 state and master read and 12 written, the gradient read and the
// parameter written once — one pass instead of the five or six an op-by-op update makes.
#include "optim/fused_optimizer.h"
#include "engine/step_scalars.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace zest {
namespace {

constexpr int kThreads = 512;

template <typename T>
__device__ __forceinline__ float load_as_float(const void* base, int64_t i) {
  return static_cast<float>(static_cast<const T*>(base)[i]);
}
template <>
__device__ __forceinline__ float load_as_float<__nv_bfloat16>(const void* base, int64_t i) {
  return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[i]);
}
template <>
__device__ __forceinline__ float load_as_float<__half>(const void* base, int64_t i) {
  return __half2float(static_cast<const __half*>(base)[i]);
}

template <typename T>
__device__ __forceinline__ void store_from_float(void* base, int64_t i, float value) {
  static_cast<T*>(base)[i] = static_cast<T>(value);
}
template <>
__device__ __forceinline__ void store_from_float<__nv_bfloat16>(void* base, int64_t i, float value) {
  static_cast<__nv_bfloat16*>(base)[i] = __float2bfloat16_rn(value);
}
template <>
__device__ __forceinline__ void store_from_float<__half>(void* base, int64_t i, float value) {
  static_cast<__half*>(base)[i] = __float2half_rn(value);
}

// One block per chunk; the rule's update per element (optim/adamw.h, sgd.h, lion.h).
template <typename Rule, typename G, typename P>
__global__ void update_kernel(const FusedChunk* chunks, float* master, float* s0, float* s1, const double* scalars,
                              OptimHyper h) {
  constexpr int kStates = static_cast<int>(sizeof(Rule::kStates) / sizeof(Rule::kStates[0]));
  const StepScalars& scalars_of_step = *reinterpret_cast<const StepScalars*>(scalars);
  if (scalars_of_step.skip != 0.0) return;
  const FusedChunk chunk = chunks[blockIdx.x];
  const StepValues s = step_values(scalars_of_step);
  const float wd = h.weight_decay * chunk.decay;
  for (int64_t i = threadIdx.x; i < chunk.numel; i += blockDim.x) {
    const int64_t k = chunk.state_offset + i;
    const float p0 = master[k];
    const float g = load_as_float<G>(chunk.grad, i) * s.multiplier;
    float state[kMaxStates];
    if constexpr (kStates > 0) state[0] = s0[k];
    if constexpr (kStates > 1) state[1] = s1[k];
    const float p = Rule::update(h, s, wd, g, p0, state);
    if constexpr (kStates > 0) s0[k] = state[0];
    if constexpr (kStates > 1) s1[k] = state[1];
    master[k] = p;
    store_from_float<P>(chunk.param, i, p);
  }
}

void check_launch(const char* what) {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) throw std::runtime_error(std::string(what) + " launch failed: " + cudaGetErrorString(err));
}

// Calls fn.template operator()<G, P>() for the runtime dtypes.
template <typename Fn>
void dispatch(FusedDtype grad, FusedDtype param, Fn&& fn) {
  auto with_param = [&](auto g_tag) {
    using G = decltype(g_tag);
    switch (param) {
      case FusedDtype::fp32: fn.template operator()<G, float>(); return;
      case FusedDtype::bf16: fn.template operator()<G, __nv_bfloat16>(); return;
      case FusedDtype::fp16: fn.template operator()<G, __half>(); return;
    }
  };
  switch (grad) {
    case FusedDtype::fp32: with_param(float{}); return;
    case FusedDtype::bf16: with_param(__nv_bfloat16{}); return;
    case FusedDtype::fp16: with_param(__half{}); return;
  }
}

}  // namespace

void launch_fused_update(OptimizerKind kind, const FusedChunk* chunks, int64_t num_chunks, float* master,
                         float* const (&state)[kMaxStates], const double* scalars, const OptimHyper& hyper,
                         FusedDtype grad_dtype, FusedDtype param_dtype, void* cuda_stream) {
  if (num_chunks == 0) return;
  auto stream = static_cast<cudaStream_t>(cuda_stream);
  with_rule(kind, [&]<typename Rule>(Rule) {
    dispatch(grad_dtype, param_dtype, [&]<typename G, typename P>() {
      update_kernel<Rule, G, P><<<static_cast<unsigned>(num_chunks), kThreads, 0, stream>>>(
          chunks, master, state[0], state[1], scalars, hyper);
    });
  });
  check_launch("fused optimizer");
}

}  // namespace zest
