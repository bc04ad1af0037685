// RoPE kernels (see rope.h): one thread per V consecutive elements (V/2 pairs) of a head.
#include "kernels/kernel_access.cuh"
#include "kernels/rope.h"

namespace zest {
namespace {

using namespace kernels;

constexpr int kThreads = 256;

// One pass over x (forward) or dy (backward): `rotate` maps a pair and the position's tables to the
// output pair.
template <typename T, int V, typename Rotate>
__device__ __forceinline__ void rope_pass(const RopeShape& s, const T* in, const float* cos, const float* sin, T* out,
                                          Rotate rotate) {
  const int64_t packs = s.batch * s.seq * s.heads * s.head_dim / V;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < packs;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t e = i * V, j = e % s.head_dim, position = (e / (s.heads * s.head_dim)) % s.seq;
    auto pack = load<T, V>(in, e);
    if (position < s.rotated) {
      const float* c = cos + position * s.head_dim + j;
      const float* n = sin + position * s.head_dim + j;
#pragma unroll
      for (int p = 0; p < V; p += 2) {
        float a = to_float(pack.v[p]), b = to_float(pack.v[p + 1]);
        rotate(a, b, c[p], c[p + 1], n[p], n[p + 1]);
        pack.v[p] = from_float<T>(a), pack.v[p + 1] = from_float<T>(b);
      }
    }
    store<T, V>(out, e, pack);
  }
}

// (x0, x1) → (x0·c0 + (−x1)·s0, x1·c1 + x0·s1), each product and the sum rounded on its own (no FMA).
template <typename T, int V>
__global__ void forward_kernel(RopeShape s, const T* x, const float* cos, const float* sin, T* y) {
  rope_pass<T, V>(s, x, cos, sin, y, [](float& x0, float& x1, float c0, float c1, float s0, float s1) {
    const float y0 = __fadd_rn(__fmul_rn(x0, c0), __fmul_rn(-x1, s0));
    const float y1 = __fadd_rn(__fmul_rn(x1, c1), __fmul_rn(x0, s1));
    x0 = y0, x1 = y1;
  });
}

// The transpose: (g0, g1) → (g0·c0 + g1·s1, g1·c1 − g0·s0).
template <typename T, int V>
__global__ void backward_kernel(RopeShape s, const T* dy, const float* cos, const float* sin, T* dx) {
  rope_pass<T, V>(s, dy, cos, sin, dx, [](float& g0, float& g1, float c0, float c1, float s0, float s1) {
    const float d0 = __fadd_rn(__fmul_rn(g0, c0), __fmul_rn(g1, s1));
    const float d1 = __fadd_rn(__fmul_rn(g1, c1), -__fmul_rn(g0, s0));
    g0 = d0, g1 = d1;
  });
}

unsigned blocks_for(const RopeShape& s) {
  const int64_t packs = s.batch * s.seq * s.heads * s.head_dim / s.vector_width;
  return static_cast<unsigned>((packs + kThreads - 1) / kThreads);
}

}  // namespace

int rope_vector_width(int64_t head_dim, int element_bytes, const void* const* pointers, int num_pointers) {
  return widest_vector_width(head_dim, element_bytes, pointers, num_pointers, /*narrowest=*/2);  // whole pairs
}

void launch_rope_forward(const RopeShape& shape, KernelDtype dtype, const void* x, const float* cos, const float* sin,
                         void* y, void* cuda_stream) {
  const auto stream = static_cast<cudaStream_t>(cuda_stream);
  dispatch(dtype, shape.vector_width, [&]<typename T, int V>() {
    if constexpr (V % 2 == 0) {
      forward_kernel<T, V><<<blocks_for(shape), kThreads, 0, stream>>>(shape, static_cast<const T*>(x), cos, sin,
                                                                       static_cast<T*>(y));
    }
  });
  check_launch("RoPE forward");
}

void launch_rope_backward(const RopeShape& shape, KernelDtype dtype, const void* dy, const float* cos,
                          const float* sin, void* dx, void* cuda_stream) {
  const auto stream = static_cast<cudaStream_t>(cuda_stream);
  dispatch(dtype, shape.vector_width, [&]<typename T, int V>() {
    if constexpr (V % 2 == 0) {
      backward_kernel<T, V><<<blocks_for(shape), kThreads, 0, stream>>>(shape, static_cast<const T*>(dy), cos, sin,
                                                                        static_cast<T*>(dx));
    }
  });
  check_launch("RoPE backward");
}

}  // namespace zest
