// GEGLU kernels (see geglu.h): one thread per V consecutive elements of the inner dimension.
#include "kernels/geglu.h"
#include "kernels/kernel_access.cuh"

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace zest {
namespace {

using namespace kernels;

constexpr int kThreads = 256;

__device__ __forceinline__ float gelu_of(float g) { return 0.5f * g * (1.0f + erff(g * 0.70710678118654752f)); }
__device__ __forceinline__ float gelu_grad(float g) {
  const float cdf = 0.5f * (1.0f + erff(g * 0.70710678118654752f));
  const float pdf = expf(-0.5f * g * g) * 0.39894228040143268f;  // 1/√(2π)
  return cdf + g * pdf;
}

template <typename T, int V>
__global__ void forward_kernel(const T* proj, int64_t rows, int64_t inner, T* out) {
  const int64_t packs_per_row = inner / V, packs = rows * packs_per_row;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < packs;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = i / packs_per_row, col = (i % packs_per_row) * V;
    const auto hidden = load<T, V>(proj, row * 2 * inner + col);
    const auto gate = load<T, V>(proj, row * 2 * inner + inner + col);
    Pack<T, V> result;
#pragma unroll
    for (int v = 0; v < V; ++v) {
      result.v[v] = from_float<T>(to_float(hidden.v[v]) * rounded<T>(gelu_of(to_float(gate.v[v]))));
    }
    store<T, V>(out, row * inner + col, result);
  }
}

template <typename T, int V>
__global__ void backward_kernel(const T* proj, const T* d_out, int64_t rows, int64_t inner, T* d_proj) {
  const int64_t packs_per_row = inner / V, packs = rows * packs_per_row;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < packs;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = i / packs_per_row, col = (i % packs_per_row) * V;
    const auto hidden = load<T, V>(proj, row * 2 * inner + col);
    const auto gate = load<T, V>(proj, row * 2 * inner + inner + col);
    const auto grad = load<T, V>(d_out, row * inner + col);
    Pack<T, V> d_hidden, d_gate;
#pragma unroll
    for (int v = 0; v < V; ++v) {
      const float g = to_float(gate.v[v]), dy = to_float(grad.v[v]);
      d_hidden.v[v] = from_float<T>(dy * rounded<T>(gelu_of(g)));
      d_gate.v[v] = from_float<T>(rounded<T>(dy * to_float(hidden.v[v])) * gelu_grad(g));
    }
    store<T, V>(d_proj, row * 2 * inner + col, d_hidden);
    store<T, V>(d_proj, row * 2 * inner + inner + col, d_gate);
  }
}

unsigned blocks_for(int64_t items) { return static_cast<unsigned>((items + kThreads - 1) / kThreads); }

}  // namespace

int geglu_vector_width(int64_t inner, int element_bytes, const void* const* pointers, int num_pointers) {
  return widest_vector_width(inner, element_bytes, pointers, num_pointers, /*narrowest=*/1);
}

void launch_geglu_forward(int64_t rows, int64_t inner, int vector_width, KernelDtype dtype, const void* proj,
                          void* out, void* cuda_stream) {
  const auto stream = static_cast<cudaStream_t>(cuda_stream);
  dispatch(dtype, vector_width, [&]<typename T, int V>() {
    forward_kernel<T, V><<<blocks_for(rows * inner / V), kThreads, 0, stream>>>(static_cast<const T*>(proj), rows,
                                                                              inner, static_cast<T*>(out));
  });
  check_launch("GEGLU forward");
}

void launch_geglu_backward(int64_t rows, int64_t inner, int vector_width, KernelDtype dtype, const void* proj,
                           const void* d_out, void* d_proj, void* cuda_stream) {
  const auto stream = static_cast<cudaStream_t>(cuda_stream);
  dispatch(dtype, vector_width, [&]<typename T, int V>() {
    backward_kernel<T, V><<<blocks_for(rows * inner / V), kThreads, 0, stream>>>(
        static_cast<const T*>(proj), static_cast<const T*>(d_out), rows, inner, static_cast<T*>(d_proj));
  });
  check_launch("GEGLU backward");
}

}  // namespace zest
