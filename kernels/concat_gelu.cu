// [left | GELU_tanh(right)] kernels (see concat_gelu.h): one thread per pack of V elements; a pack never
// straddles the two parts (V divides left's width). GELU's tanh form and its derivative are written as
// ATen's kernels write them, in float.
#include "kernels/concat_gelu.h"
#include "kernels/kernel_access.cuh"

#include <algorithm>

namespace zest {
namespace {

using namespace kernels;

constexpr int kThreads = 256;
constexpr float kBeta = 0.7978845608028654f;  // √(2/π)
constexpr float kKappa = 0.044715f;

__device__ __forceinline__ float gelu_tanh(float x) {
  const float x_cube = x * x * x;
  const float inner = kBeta * (x + kKappa * x_cube);
  return 0.5f * x * (1.0f + tanhf(inner));
}

__device__ __forceinline__ float gelu_tanh_grad(float x) {
  const float x_sq = x * x;
  const float tanh_inner = tanhf(kBeta * (x + kKappa * x_sq * x));
  const float left_derivative = 0.5f * (1.0f + tanh_inner);
  const float tanh_derivative = 1.0f - tanh_inner * tanh_inner;
  const float inner_derivative = kBeta * (1.0f + 3.0f * kKappa * x_sq);
  return left_derivative + 0.5f * x * tanh_derivative * inner_derivative;
}

template <typename T, int V>
__global__ void forward_kernel(ConcatRows r, const T* left, const T* right, T* out) {
  const int64_t width = r.left_width + r.right_width;
  const int64_t packs_per_row = width / V, packs = r.rows * packs_per_row;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < packs;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = i / packs_per_row, col = (i % packs_per_row) * V;
    Pack<T, V> result;
    if (col < r.left_width) {
      result = load<T, V>(left, row * r.left_stride + col);
    } else {
      const auto x = load<T, V>(right, row * r.right_stride + col - r.left_width);
#pragma unroll
      for (int v = 0; v < V; ++v) result.v[v] = from_float<T>(gelu_tanh(to_float(x.v[v])));
    }
    store<T, V>(out, row * width + col, result);
  }
}

template <typename T, int V>
__global__ void backward_kernel(ConcatRows r, const T* d_out, const T* right, T* d_right) {
  const int64_t width = r.left_width + r.right_width;
  const int64_t packs_per_row = r.right_width / V, packs = r.rows * packs_per_row;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < packs;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = i / packs_per_row, col = (i % packs_per_row) * V;
    const auto x = load<T, V>(right, row * r.right_stride + col);
    const auto grad = load<T, V>(d_out, row * width + r.left_width + col);
    Pack<T, V> result;
#pragma unroll
    for (int v = 0; v < V; ++v) result.v[v] = from_float<T>(to_float(grad.v[v]) * gelu_tanh_grad(to_float(x.v[v])));
    store<T, V>(d_right, row * r.right_width + col, result);
  }
}

unsigned blocks_for(int64_t packs) {
  return static_cast<unsigned>(std::min<int64_t>((packs + kThreads - 1) / kThreads, 1 << 30));
}

}  // namespace

int concat_gelu_vector_width(const ConcatRows& rows, int element_bytes, const void* const* pointers, int num_pointers) {
  // Every extent a pack steps over: both widths and both row strides.
  const int64_t extents[] = {rows.left_width, rows.right_width, rows.left_stride, rows.right_stride};
  int width = 8;
  for (const int64_t extent : extents) {
    width = std::min(width, widest_vector_width(extent, element_bytes, pointers, num_pointers, /*narrowest=*/1));
  }
  return width;
}

void launch_concat_gelu_forward(const ConcatRows& rows, int vector_width, KernelDtype dtype, const void* left,
                                const void* right, void* out, void* cuda_stream) {
  const auto stream = static_cast<cudaStream_t>(cuda_stream);
  dispatch(dtype, vector_width, [&]<typename T, int V>() {
    forward_kernel<T, V><<<blocks_for(rows.rows * rows.width() / V), kThreads, 0, stream>>>(
        rows, static_cast<const T*>(left), static_cast<const T*>(right), static_cast<T*>(out));
  });
  check_launch("concatenated GELU forward");
}

void launch_concat_gelu_backward(const ConcatRows& rows, int vector_width, KernelDtype dtype, const void* d_out,
                                 const void* right, void* d_right, void* cuda_stream) {
  const auto stream = static_cast<cudaStream_t>(cuda_stream);
  dispatch(dtype, vector_width, [&]<typename T, int V>() {
    backward_kernel<T, V><<<blocks_for(rows.rows * rows.right_width / V), kThreads, 0, stream>>>(
        rows, static_cast<const T*>(d_out), static_cast<const T*>(right), static_cast<T*>(d_right));
  });
  check_launch("concatenated GELU backward");
}

}  // namespace zest
