// Fused AdamW / SGD kernels over the chunk table (see fused_optimizer.h). Memory-bound: per element of
// AdamW, 16 bytes of fp32 state and master read and 12 written, the gradient read and the parameter
// written once — one pass instead of the five or six an op-by-op update makes.
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

// PyTorch's AdamW: p·(1−lr·wd); m ← m + (1−β1)(g−m); v ← β2·v + (1−β2)·g²; p −= lr/bc1 · m/(√v/√bc2 + ε).
template <typename G, typename P>
__global__ void adamw_kernel(const FusedChunk* chunks, float* master, float* exp_avg, float* exp_avg_sq,
                             const double* scalars, FusedHyper h) {
  const StepScalars& s = *reinterpret_cast<const StepScalars*>(scalars);
  if (s.skip != 0.0) return;
  const FusedChunk chunk = chunks[blockIdx.x];
  const float multiplier = static_cast<float>(s.grad_multiplier);
  const float lr = static_cast<float>(s.lr);
  const float step_size = static_cast<float>(s.lr / s.bias_correction1);
  const float bc2_sqrt = static_cast<float>(s.bias_correction2_sqrt);
  const float decay = 1.0f - lr * h.weight_decay * chunk.decay;
  for (int64_t i = threadIdx.x; i < chunk.numel; i += blockDim.x) {
    const int64_t k = chunk.state_offset + i;
    const float g = load_as_float<G>(chunk.grad, i) * multiplier;
    float m = exp_avg[k];
    float v = exp_avg_sq[k];
    m += (1.0f - h.beta1) * (g - m);
    v = h.beta2 * v + (1.0f - h.beta2) * g * g;
    const float denom = sqrtf(v) / bc2_sqrt + h.eps;
    const float p = master[k] * decay - step_size * m / denom;
    exp_avg[k] = m;
    exp_avg_sq[k] = v;
    master[k] = p;
    store_from_float<P>(chunk.param, i, p);
  }
}

// PyTorch's SGD: g + wd·p; b ← μ·b + g (b = g on the first update); g + μ·b (Nesterov) or b; p −= lr·g.
template <typename G, typename P>
__global__ void sgd_kernel(const FusedChunk* chunks, float* master, float* momentum_buffer, const double* scalars,
                           FusedHyper h) {
  const StepScalars& s = *reinterpret_cast<const StepScalars*>(scalars);
  if (s.skip != 0.0) return;
  const FusedChunk chunk = chunks[blockIdx.x];
  const float multiplier = static_cast<float>(s.grad_multiplier);
  const float lr = static_cast<float>(s.lr);
  const bool first = s.applied_steps == 1.0;
  const float wd = h.weight_decay * chunk.decay;
  for (int64_t i = threadIdx.x; i < chunk.numel; i += blockDim.x) {
    const int64_t k = chunk.state_offset + i;
    float p = master[k];
    float g = load_as_float<G>(chunk.grad, i) * multiplier + wd * p;
    if (h.momentum != 0.0f) {
      const float b = first ? g : h.momentum * momentum_buffer[k] + g;
      momentum_buffer[k] = b;
      g = h.nesterov ? g + h.momentum * b : b;
    }
    p -= lr * g;
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

void launch_fused_adamw(const FusedChunk* chunks, int64_t num_chunks, float* master, float* exp_avg,
                        float* exp_avg_sq, const double* scalars, const FusedHyper& hyper, FusedDtype grad_dtype,
                        FusedDtype param_dtype, void* cuda_stream) {
  if (num_chunks == 0) return;
  auto stream = static_cast<cudaStream_t>(cuda_stream);
  dispatch(grad_dtype, param_dtype, [&]<typename G, typename P>() {
    adamw_kernel<G, P><<<static_cast<unsigned>(num_chunks), kThreads, 0, stream>>>(chunks, master, exp_avg,
                                                                                   exp_avg_sq, scalars, hyper);
  });
  check_launch("fused AdamW");
}

void launch_fused_sgd(const FusedChunk* chunks, int64_t num_chunks, float* master, float* momentum_buffer,
                      const double* scalars, const FusedHyper& hyper, FusedDtype grad_dtype, FusedDtype param_dtype,
                      void* cuda_stream) {
  if (num_chunks == 0) return;
  auto stream = static_cast<cudaStream_t>(cuda_stream);
  dispatch(grad_dtype, param_dtype, [&]<typename G, typename P>() {
    sgd_kernel<G, P><<<static_cast<unsigned>(num_chunks), kThreads, 0, stream>>>(chunks, master, momentum_buffer,
                                                                                 scalars, hyper);
  });
  check_launch("fused SGD");
}

}  // namespace zest
