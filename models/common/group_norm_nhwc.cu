// Group norm (+ SiLU) kernels over channels-last activations (see group_norm_nhwc.h). Each (sample, row
// chunk) block reads whole pixel rows — every thread a fixed run of `vector_width` channels of one group —
// and reduces its chunk per group (Welford) and, in backward, per channel; small kernels then combine the
// chunks in a fixed order; elementwise kernels apply the result. Forward reads x twice and writes y once;
// backward reads x and dy twice and writes dx once: no float32 copies of the activations.
#include "models/common/group_norm_nhwc.h"
#include "models/common/kernel_access.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace zest {
namespace {

using namespace kernels;

constexpr int64_t kRowsPerChunk = 64;
constexpr int kElementwiseThreads = 256;
constexpr int kSmallThreads = 128;
constexpr int kMaxLanes = 1024;

// Running count, mean and sum of squared deviations; merged with Chan's formula.
struct Welford {
  float count = 0.0f, mean = 0.0f, m2 = 0.0f;
  __device__ void add(float x) {
    count += 1.0f;
    const float delta = x - mean;
    mean += delta / count;
    m2 += delta * (x - mean);
  }
  __device__ void merge(float b_count, float b_mean, float b_m2) {
    if (b_count == 0.0f) return;
    const float total = count + b_count;
    const float delta = b_mean - mean;
    mean += delta * (b_count / total);
    m2 += b_m2 + delta * delta * (count * b_count / total);
    count = total;
  }
};

struct Layout {  // the index arithmetic every kernel shares
  int64_t n, hw, c, groups, chunks;
  int lanes, lanes_per_group;
};

Layout layout_of(const GroupNormShape& s, int vector_width) {
  const int lanes = static_cast<int>(s.c / vector_width);
  return {s.n, s.hw, s.c, s.groups, s.chunks(), lanes, static_cast<int>(s.c / s.groups / vector_width)};
}

dim3 chunk_block(const Layout& l) {
  const int rows = std::max(1, std::min(static_cast<int>(kRowsPerChunk), 128 / l.lanes));
  return dim3(static_cast<unsigned>(l.lanes), static_cast<unsigned>(rows));
}
dim3 chunk_grid(const Layout& l) { return dim3(static_cast<unsigned>(l.chunks), static_cast<unsigned>(l.n)); }
unsigned blocks_for(int64_t items, int threads) { return static_cast<unsigned>((items + threads - 1) / threads); }

__device__ __forceinline__ float silu_of(float z) { return z / (1.0f + __expf(-z)); }
__device__ __forceinline__ float silu_grad(float z) {
  const float s = 1.0f / (1.0f + __expf(-z));
  return s * (1.0f + z * (1.0f - s));
}

// ---- forward ------------------------------------------------------------------------------------------

// partial [n][chunks][groups][3]: the chunk's Welford state per group.
template <typename T, int V>
__global__ void stats_kernel(const T* x, Layout l, float* partial) {
  extern __shared__ float shared[];
  const int lane = threadIdx.x, row_lane = threadIdx.y;
  const int64_t n = blockIdx.y, chunk = blockIdx.x;
  const int64_t row_end = min(l.hw, (chunk + 1) * kRowsPerChunk);
  Welford w;
  for (int64_t row = chunk * kRowsPerChunk + row_lane; row < row_end; row += blockDim.y) {
    const auto p = load<T, V>(x, (n * l.hw + row) * l.c + lane * V);
#pragma unroll
    for (int v = 0; v < V; ++v) w.add(to_float(p.v[v]));
  }
  float* mine = shared + 3 * (row_lane * blockDim.x + lane);
  mine[0] = w.count, mine[1] = w.mean, mine[2] = w.m2;
  __syncthreads();
  const int tid = row_lane * blockDim.x + lane;
  for (int64_t g = tid; g < l.groups; g += blockDim.x * blockDim.y) {
    Welford total;
    for (unsigned r = 0; r < blockDim.y; ++r) {
      for (int64_t k = g * l.lanes_per_group; k < (g + 1) * l.lanes_per_group; ++k) {
        const float* o = shared + 3 * (r * blockDim.x + k);
        total.merge(o[0], o[1], o[2]);
      }
    }
    float* out = partial + 3 * ((n * l.chunks + chunk) * l.groups + g);
    out[0] = total.count, out[1] = total.mean, out[2] = total.m2;
  }
}

__global__ void finalize_stats_kernel(const float* partial, Layout l, float eps, float* mean, float* rstd) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= l.n * l.groups) return;
  const int64_t n = i / l.groups, g = i % l.groups;
  Welford total;
  for (int64_t chunk = 0; chunk < l.chunks; ++chunk) {
    const float* p = partial + 3 * ((n * l.chunks + chunk) * l.groups + g);
    total.merge(p[0], p[1], p[2]);
  }
  mean[i] = total.mean;
  rstd[i] = rsqrtf(total.m2 / total.count + eps);  // the biased variance, as group norm uses
}

template <typename T, int V>
__global__ void normalize_kernel(const T* x, const T* weight, const T* bias, const float* mean, const float* rstd,
                                 Layout l, bool silu, T* y) {
  const int64_t packs = l.n * l.hw * l.lanes;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < packs;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t lane = i % l.lanes, n = i / (l.lanes * l.hw);
    const int64_t stat = n * l.groups + lane / l.lanes_per_group;
    const float m = mean[stat], r = rstd[stat];
    const auto p = load<T, V>(x, i * V);
    Pack<T, V> out;
#pragma unroll
    for (int v = 0; v < V; ++v) {
      const int64_t c = lane * V + v;
      const float z = (to_float(p.v[v]) - m) * r * to_float(weight[c]) + to_float(bias[c]);
      out.v[v] = from_float<T>(silu ? silu_of(z) : z);
    }
    store<T, V>(y, i * V, out);
  }
}

// ---- backward -----------------------------------------------------------------------------------------

// The gradient reaching the norm's affine output (through SiLU when fused), and x normalised.
template <typename T>
__device__ __forceinline__ void affine_grad(float x, float dy, float m, float r, float w, float b, bool silu,
                                            float& xhat, float& dz) {
  xhat = (x - m) * r;
  dz = silu ? dy * silu_grad(xhat * w + b) : dy;
}

// channel_partial [n][chunks][2][c]: Σ dz and Σ dz·x̂ per channel; group_partial [n][chunks][groups][2]:
// Σ dx̂ and Σ dx̂·x̂ per group (dx̂ = dz·weight).
template <typename T, int V>
__global__ void backward_reduce_kernel(const T* dy, const T* x, const float* mean, const float* rstd,
                                       const T* weight, const T* bias, Layout l, bool silu, float* channel_partial,
                                       float* group_partial) {
  extern __shared__ float shared[];  // [rows][lanes][2·V + 2]
  const int lane = threadIdx.x, row_lane = threadIdx.y;
  const int64_t n = blockIdx.y, chunk = blockIdx.x;
  const int64_t row_end = min(l.hw, (chunk + 1) * kRowsPerChunk);
  const int64_t stat = n * l.groups + lane / l.lanes_per_group;
  const float m = mean[stat], r = rstd[stat];
  float w[V], b[V], sum_dz[V] = {}, sum_dz_xhat[V] = {};
  float sum_dxhat = 0.0f, sum_dxhat_xhat = 0.0f;
#pragma unroll
  for (int v = 0; v < V; ++v) w[v] = to_float(weight[lane * V + v]), b[v] = to_float(bias[lane * V + v]);
  for (int64_t row = chunk * kRowsPerChunk + row_lane; row < row_end; row += blockDim.y) {
    const int64_t at = (n * l.hw + row) * l.c + lane * V;
    const auto px = load<T, V>(x, at);
    const auto pdy = load<T, V>(dy, at);
#pragma unroll
    for (int v = 0; v < V; ++v) {
      float xhat, dz;
      affine_grad<T>(to_float(px.v[v]), to_float(pdy.v[v]), m, r, w[v], b[v], silu, xhat, dz);
      sum_dz[v] += dz;
      sum_dz_xhat[v] += dz * xhat;
      sum_dxhat += dz * w[v];
      sum_dxhat_xhat += dz * w[v] * xhat;
    }
  }
  const int stride = 2 * V + 2;
  float* mine = shared + stride * (row_lane * blockDim.x + lane);
#pragma unroll
  for (int v = 0; v < V; ++v) mine[v] = sum_dz[v], mine[V + v] = sum_dz_xhat[v];
  mine[2 * V] = sum_dxhat, mine[2 * V + 1] = sum_dxhat_xhat;
  __syncthreads();
  const int64_t block = n * l.chunks + chunk;
  if (row_lane == 0) {  // per channel: this lane's V channels over the rows
    for (int v = 0; v < 2 * V; ++v) {
      float total = 0.0f;
      for (unsigned k = 0; k < blockDim.y; ++k) total += shared[stride * (k * blockDim.x + lane) + v];
      const int64_t which = v / V, c = lane * V + v % V;
      channel_partial[(block * 2 + which) * l.c + c] = total;
    }
  }
  const int tid = row_lane * blockDim.x + lane;
  for (int64_t g = tid; g < l.groups; g += blockDim.x * blockDim.y) {
    float a = 0.0f, bsum = 0.0f;
    for (unsigned k = 0; k < blockDim.y; ++k) {
      for (int64_t j = g * l.lanes_per_group; j < (g + 1) * l.lanes_per_group; ++j) {
        const float* o = shared + stride * (k * blockDim.x + j);
        a += o[2 * V], bsum += o[2 * V + 1];
      }
    }
    group_partial[(block * l.groups + g) * 2] = a;
    group_partial[(block * l.groups + g) * 2 + 1] = bsum;
  }
}

__global__ void finalize_channels_kernel(const float* channel_partial, Layout l, float* dweight, float* dbias) {
  const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (c >= l.c) return;
  float db = 0.0f, dw = 0.0f;
  for (int64_t block = 0; block < l.n * l.chunks; ++block) {
    db += channel_partial[(block * 2) * l.c + c];
    dw += channel_partial[(block * 2 + 1) * l.c + c];
  }
  dbias[c] = db, dweight[c] = dw;
}

// coef [n][groups][2]: the means of dx̂ and dx̂·x̂ over the group.
__global__ void finalize_groups_kernel(const float* group_partial, Layout l, float* coef) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= l.n * l.groups) return;
  const int64_t n = i / l.groups, g = i % l.groups;
  float a = 0.0f, b = 0.0f;
  for (int64_t chunk = 0; chunk < l.chunks; ++chunk) {
    const float* p = group_partial + ((n * l.chunks + chunk) * l.groups + g) * 2;
    a += p[0], b += p[1];
  }
  const float elements = static_cast<float>(l.hw * (l.c / l.groups));
  coef[2 * i] = a / elements, coef[2 * i + 1] = b / elements;
}

// dx = rstd · (dx̂ − mean(dx̂) − x̂ · mean(dx̂·x̂)).
template <typename T, int V>
__global__ void dx_kernel(const T* dy, const T* x, const float* mean, const float* rstd, const T* weight,
                          const T* bias, const float* coef, Layout l, bool silu, T* dx) {
  const int64_t packs = l.n * l.hw * l.lanes;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < packs;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t lane = i % l.lanes, n = i / (l.lanes * l.hw);
    const int64_t stat = n * l.groups + lane / l.lanes_per_group;
    const float m = mean[stat], r = rstd[stat], mean_dxhat = coef[2 * stat], mean_dxhat_xhat = coef[2 * stat + 1];
    const auto px = load<T, V>(x, i * V);
    const auto pdy = load<T, V>(dy, i * V);
    Pack<T, V> out;
#pragma unroll
    for (int v = 0; v < V; ++v) {
      const int64_t c = lane * V + v;
      const float w = to_float(weight[c]);
      float xhat, dz;
      affine_grad<T>(to_float(px.v[v]), to_float(pdy.v[v]), m, r, w, to_float(bias[c]), silu, xhat, dz);
      out.v[v] = from_float<T>(r * (dz * w - mean_dxhat - xhat * mean_dxhat_xhat));
    }
    store<T, V>(dx, i * V, out);
  }
}

}  // namespace

int64_t GroupNormShape::chunks() const { return (hw + kRowsPerChunk - 1) / kRowsPerChunk; }

int group_norm_nhwc_vector_width(int64_t c, int64_t groups, int element_bytes, const void* const* pointers,
                                 int num_pointers) {
  if (groups <= 0 || c % groups != 0) return 0;
  // A wider access needs fewer lanes, so the widest aligned one is the one to check against the limit.
  const int width = widest_vector_width(c / groups, element_bytes, pointers, num_pointers, /*narrowest=*/1);
  return width > 0 && c / width <= kMaxLanes ? width : 0;
}

int64_t group_norm_nhwc_forward_scratch(const GroupNormShape& s) { return s.n * s.chunks() * s.groups * 3; }
int64_t group_norm_nhwc_backward_scratch(const GroupNormShape& s) {
  return s.n * s.chunks() * (2 * s.c + 2 * s.groups) + 2 * s.n * s.groups;
}

void launch_group_norm_nhwc_forward(const GroupNormShape& shape, KernelDtype dtype, const void* x, const void* weight,
                                    const void* bias, double eps, bool silu, void* y, float* mean, float* rstd,
                                    float* scratch, void* cuda_stream) {
  const Layout l = layout_of(shape, shape.vector_width);
  const auto stream = static_cast<cudaStream_t>(cuda_stream);
  const dim3 block = chunk_block(l);
  dispatch(dtype, shape.vector_width, [&]<typename T, int V>() {
    stats_kernel<T, V><<<chunk_grid(l), block, 3 * sizeof(float) * block.x * block.y, stream>>>(
        static_cast<const T*>(x), l, scratch);
    finalize_stats_kernel<<<blocks_for(l.n * l.groups, kSmallThreads), kSmallThreads, 0, stream>>>(
        scratch, l, static_cast<float>(eps), mean, rstd);
    normalize_kernel<T, V><<<blocks_for(l.n * l.hw * l.lanes, kElementwiseThreads), kElementwiseThreads, 0, stream>>>(
        static_cast<const T*>(x), static_cast<const T*>(weight), static_cast<const T*>(bias), mean, rstd, l, silu,
        static_cast<T*>(y));
  });
  check_launch("group norm forward");
}

void launch_group_norm_nhwc_backward(const GroupNormShape& shape, KernelDtype dtype, const void* dy, const void* x,
                                     const float* mean, const float* rstd, const void* weight, const void* bias,
                                     bool silu, void* dx, float* dweight, float* dbias, float* scratch,
                                     void* cuda_stream) {
  const Layout l = layout_of(shape, shape.vector_width);
  const auto stream = static_cast<cudaStream_t>(cuda_stream);
  float* channel_partial = scratch;
  float* group_partial = channel_partial + l.n * l.chunks * 2 * l.c;
  float* coef = group_partial + l.n * l.chunks * l.groups * 2;
  const dim3 block = chunk_block(l);
  dispatch(dtype, shape.vector_width, [&]<typename T, int V>() {
    const auto* typed_weight = static_cast<const T*>(weight);
    const auto* typed_bias = static_cast<const T*>(bias);
    const size_t shared_bytes = (2 * V + 2) * sizeof(float) * block.x * block.y;
    backward_reduce_kernel<T, V><<<chunk_grid(l), block, shared_bytes, stream>>>(
        static_cast<const T*>(dy), static_cast<const T*>(x), mean, rstd, typed_weight, typed_bias, l, silu,
        channel_partial, group_partial);
    finalize_channels_kernel<<<blocks_for(l.c, kSmallThreads), kSmallThreads, 0, stream>>>(channel_partial, l,
                                                                                           dweight, dbias);
    finalize_groups_kernel<<<blocks_for(l.n * l.groups, kSmallThreads), kSmallThreads, 0, stream>>>(group_partial, l,
                                                                                                   coef);
    dx_kernel<T, V><<<blocks_for(l.n * l.hw * l.lanes, kElementwiseThreads), kElementwiseThreads, 0, stream>>>(
        static_cast<const T*>(dy), static_cast<const T*>(x), mean, rstd, typed_weight, typed_bias, coef, l, silu,
        static_cast<T*>(dx));
  });
  check_launch("group norm backward");
}

}  // namespace zest
