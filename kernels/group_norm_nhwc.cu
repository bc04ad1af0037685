// Group norm (+ SiLU) kernels over channels-last activations (see group_norm_nhwc.h). Every reduction is
// per channel: a (sample, row chunk) block reads the chunk's pixel rows (or a share of each row, for many
// channels) — each thread a fixed run of `vector_width` channels, which may straddle groups — and writes
// its per-channel sums; the chunks are added in a fixed order (sum_tile_partials), and one small kernel
// turns the per-sample channel sums into what each group needs, since a group's sums are sums of its
// channels' (weighted by the affine weight in backward). So the widest access depends on the channel count alone, not on the group size
// (SD's 320-channel norms have groups of 10 channels: 4-byte accesses when threads kept to one group).
// Forward reads x twice and writes y once; backward reads x and dy twice and writes dx once: no float32
// copies of the activations. A channel shift (x + s[n, c]) moves every sum of x − k by nothing when k, the
// value the sums are taken about, moves with it; so it changes only the per-channel constants: the group's
// mean seen from x is the mean less s.
#include "kernels/group_norm_nhwc.h"
#include "kernels/kernel_access.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

namespace zest {
namespace {

using namespace kernels;

constexpr int64_t kMaxChunkRows = 64;  // pixel rows of a chunk block, fewer where the tensor is small
constexpr int64_t kMinChunkRows = 8;
constexpr int64_t kEnoughBlocks = 264;  // two per SM of an H200: below this a smaller chunk adds blocks
constexpr int kChunkThreads = 256;     // threads of a chunk block: about this many, or one per lane
constexpr int kSmallThreads = 128;

struct Layout {  // the index arithmetic every kernel shares
  int64_t n, hw, c, groups;
  int lanes;           // threads across a block's share of a pixel row (vector_width channels each)
  int rows;            // threads down the rows of a chunk
  int row_splits;      // blocks across a pixel row: lanes · row_splits · vector_width = c
  int64_t chunk_rows;  // pixel rows of a chunk
  int64_t chunks;      // chunks of a sample
};

// A row of more than kChunkThreads lanes is split across blocks (the fewest equal parts that fit), so
// that a block's threads and shared memory stay bounded whatever the channel count. Chunks shrink from
// kMaxChunkRows while the grid has too few blocks to fill the GPU (the UNets' 8×8 levels: 32 blocks of
// 64 rows, each thread reading its 64 rows one after another).
Layout layout_of(const GroupNormShape& s) {
  const int64_t row_lanes = s.c / s.vector_width;
  int64_t splits = (row_lanes + kChunkThreads - 1) / kChunkThreads;
  while (row_lanes % splits != 0) ++splits;
  const int lanes = static_cast<int>(row_lanes / splits);
  const int rows = static_cast<int>(std::clamp<int64_t>((kChunkThreads + lanes - 1) / lanes, 1, kMaxChunkRows));
  auto blocks = [&](int64_t chunk_rows) { return s.n * splits * ((s.hw + chunk_rows - 1) / chunk_rows); };
  int64_t chunk_rows = kMaxChunkRows;
  while (blocks(chunk_rows) < kEnoughBlocks && chunk_rows / 2 >= std::max<int64_t>(rows, kMinChunkRows)) {
    chunk_rows /= 2;
  }
  return {s.n,   s.hw,  s.c, s.groups, lanes, rows, static_cast<int>(splits), chunk_rows,
          (s.hw + chunk_rows - 1) / chunk_rows};
}

// A chunk block's [rows][2][its channels] floats of per-thread sums, added over the rows at its end.
size_t chunk_shared_bytes(const Layout& l, int vector_width) {
  return static_cast<size_t>(l.rows) * 2 * l.lanes * vector_width * sizeof(float);
}

dim3 chunk_block(const Layout& l) { return dim3(static_cast<unsigned>(l.lanes), static_cast<unsigned>(l.rows)); }
dim3 chunk_grid(const Layout& l) {
  return dim3(static_cast<unsigned>(l.chunks), static_cast<unsigned>(l.n), static_cast<unsigned>(l.row_splits));
}
unsigned blocks_for(int64_t items, int threads) { return static_cast<unsigned>((items + threads - 1) / threads); }

// The first of the V channels this thread reads in every pixel row of its chunk.
template <int V>
__device__ __forceinline__ int64_t first_channel() {
  return (static_cast<int64_t>(blockIdx.z) * blockDim.x + threadIdx.x) * V;
}

// The (sample, group) statistic channel `ch` of sample n is normalised with: index into mean, rstd, coef.
__device__ __forceinline__ int64_t stat_index(const Layout& l, int64_t n, int64_t ch) {
  return n * l.groups + ch / (l.c / l.groups);
}

// The shift of channel `ch` of sample n (0 without one).
template <typename T>
__device__ __forceinline__ float shift_of(const T* shift, const Layout& l, int64_t n, int64_t ch) {
  return shift == nullptr ? 0.0f : to_float(shift[n * l.c + ch]);
}

// Visits this thread's pixel rows of its chunk (`at`: the row's first element of this thread's channels),
// two rows a step so that two rows' loads are in flight: read(at) loads, use(at, loaded) consumes.
template <int V, typename Read, typename Use>
__device__ __forceinline__ void for_my_rows(const Layout& l, Read read, Use use) {
  const int64_t chunk = blockIdx.x, step = blockDim.y;
  const int64_t end = min(l.hw, (chunk + 1) * l.chunk_rows);
  const int64_t base = static_cast<int64_t>(blockIdx.y) * l.hw * l.c + first_channel<V>();
  int64_t row = chunk * l.chunk_rows + threadIdx.y;
  for (; row + step < end; row += 2 * step) {
    const int64_t at = base + row * l.c, next = at + step * l.c;
    const auto a = read(at);
    const auto b = read(next);
    use(at, a);
    use(next, b);
  }
  if (row < end) {
    const int64_t at = base + row * l.c;
    use(at, read(at));
  }
}

// Fast reciprocals (two ulp): SiLU's division was most of these kernels' arithmetic.
__device__ __forceinline__ float sigmoid_of(float z) { return __fdividef(1.0f, 1.0f + __expf(-z)); }
__device__ __forceinline__ float silu_of(float z) { return z * sigmoid_of(z); }
__device__ __forceinline__ float silu_grad(float z) {
  const float s = sigmoid_of(z);
  return s * (1.0f + z * (1.0f - s));
}

// The block's per-thread sums of its channels (two each, [row lane][2][channels] in shared memory) added
// over the row lanes in order, then written as this chunk's partial [n][chunks][2][c].
template <int V>
__device__ void write_chunk_sums(float* shared, const Layout& l, float* partial) {
  __syncthreads();
  const int64_t block = blockIdx.y * l.chunks + blockIdx.x;
  const int64_t channels = blockDim.x * V, base = blockIdx.z * channels;
  for (int64_t j = threadIdx.y * blockDim.x + threadIdx.x; j < 2 * channels; j += blockDim.x * blockDim.y) {
    float total = 0.0f;
    for (unsigned k = 0; k < blockDim.y; ++k) total += shared[k * 2 * channels + j];
    const int64_t which = j / channels, ch = base + j % channels;
    partial[(block * 2 + which) * l.c + ch] = total;
  }
}

// Where this thread's V pairs of sums go in the block's shared memory.
template <int V>
__device__ __forceinline__ void keep_thread_sums(float* shared, const float (&first)[V], const float (&second)[V]) {
  const int64_t channels = blockDim.x * V;
  float* mine = shared + threadIdx.y * 2 * channels + threadIdx.x * V;
#pragma unroll
  for (int v = 0; v < V; ++v) mine[v] = first[v], mine[channels + v] = second[v];
}

// Per-sample channel sums [n][2][c] from the chunks' partials (the partials themselves when one chunk).
const float* add_chunks(const float* partial, const Layout& l, float* sums, cudaStream_t stream) {
  if (l.chunks == 1) return partial;
  launch_sum_tile_partials(partial, l.n, l.chunks, 2 * l.c, sums, stream);
  return sums;
}

// ---- forward ------------------------------------------------------------------------------------------

// Per channel Σ(x − k) and Σ(x − k)², k the channel's value at the sample's first pixel: shifted sums
// keep the variance from cancelling when a channel's mean is large against its spread.
template <typename T, int V>
__global__ void channel_sums_kernel(const T* x, Layout l, float* partial) {
  extern __shared__ float shared[];
  const int64_t n = blockIdx.y, c0 = first_channel<V>();
  const auto first = load<T, V>(x, n * l.hw * l.c + c0);
  float shift[V], s1[V] = {}, s2[V] = {};
#pragma unroll
  for (int v = 0; v < V; ++v) shift[v] = to_float(first.v[v]);
  for_my_rows<V>(
      l, [&](int64_t at) { return load<T, V>(x, at); },
      [&](int64_t, const Pack<T, V>& p) {
#pragma unroll
        for (int v = 0; v < V; ++v) {
          const float d = to_float(p.v[v]) - shift[v];
          s1[v] += d;
          s2[v] += d * d;
        }
      });
  keep_thread_sums<V>(shared, s1, s2);
  write_chunk_sums<V>(shared, l, partial);
}

// mean and rstd per (sample, group) from its channels' shifted sums: Σx = Σ_c (S1 + hw·k) and
// Σ(x − μ)² = Σ_c (S2 + 2(k − μ)·S1 + hw·(k − μ)²), x and k with the channel's shift; with a shift also each
// channel's mean (S1/hw + k).
template <typename T>
__global__ void group_stats_kernel(const T* x, const T* shift, const float* sums, Layout l, float eps, float* mean,
                                   float* rstd, float* channel_means) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= l.n * l.groups) return;
  const int64_t n = i / l.groups, g = i % l.groups, per_group = l.c / l.groups;
  const float* s1 = sums + n * 2 * l.c;
  const float* s2 = s1 + l.c;
  const T* first = x + n * l.hw * l.c;
  const auto about = [&](int64_t ch) { return to_float(first[ch]) + shift_of(shift, l, n, ch); };
  const float hw = static_cast<float>(l.hw);
  float total = 0.0f;
  for (int64_t ch = g * per_group; ch < (g + 1) * per_group; ++ch) {
    total += s1[ch] + hw * about(ch);
    if (channel_means != nullptr) channel_means[n * l.c + ch] = s1[ch] / hw + about(ch);
  }
  const float mu = total / (hw * static_cast<float>(per_group));
  float m2 = 0.0f;
  for (int64_t ch = g * per_group; ch < (g + 1) * per_group; ++ch) {
    const float d = about(ch) - mu;
    m2 += s2[ch] + 2.0f * d * s1[ch] + hw * d * d;
  }
  mean[i] = mu;
  rstd[i] = rsqrtf(fmaxf(m2, 0.0f) / (hw * static_cast<float>(per_group)) + eps);  // the biased variance
}

// y = x·scale + offset per channel (scale = rstd·weight, offset = bias − (mean − shift)·scale), then SiLU.
template <typename T, int V>
__global__ void normalize_kernel(const T* x, const T* shift, const T* weight, const T* bias, const float* mean,
                                 const float* rstd, Layout l, bool silu, T* y) {
  const int64_t n = blockIdx.y, c0 = first_channel<V>();
  float scale[V], offset[V];
#pragma unroll
  for (int v = 0; v < V; ++v) {
    const int64_t stat = stat_index(l, n, c0 + v);
    scale[v] = rstd[stat] * to_float(weight[c0 + v]);
    offset[v] = to_float(bias[c0 + v]) - (mean[stat] - shift_of(shift, l, n, c0 + v)) * scale[v];
  }
  for_my_rows<V>(
      l, [&](int64_t at) { return load<T, V>(x, at); },
      [&](int64_t at, const Pack<T, V>& p) {
        Pack<T, V> out;
#pragma unroll
        for (int v = 0; v < V; ++v) {
          const float z = to_float(p.v[v]) * scale[v] + offset[v];
          out.v[v] = from_float<T>(silu ? silu_of(z) : z);
        }
        store<T, V>(y, at, out);
      });
}

// ---- backward -----------------------------------------------------------------------------------------

// One pixel row's x and dy for this thread's channels.
template <typename T, int V>
struct XAndGrad {
  Pack<T, V> x, dy;
};

// A thread's per-channel constants: the group's statistics (the mean as seen from the unshifted x) and the
// affine parameters.
template <typename T, int V>
struct ChannelConstants {
  float mean[V], rstd[V], weight[V], bias[V];
  __device__ ChannelConstants(const float* means, const float* rstds, const T* shift, const T* w, const T* b,
                              const Layout& l, int64_t n, int64_t c0) {
#pragma unroll
    for (int v = 0; v < V; ++v) {
      const int64_t stat = stat_index(l, n, c0 + v);
      mean[v] = means[stat] - shift_of(shift, l, n, c0 + v), rstd[v] = rstds[stat];
      weight[v] = to_float(w[c0 + v]), bias[v] = to_float(b[c0 + v]);
    }
  }
  // x normalised, and the gradient reaching the norm's affine output (through SiLU when fused).
  __device__ __forceinline__ void affine_grad(int v, float x, float dy, bool silu, float& xhat, float& dz) const {
    xhat = (x - mean[v]) * rstd[v];
    dz = silu ? dy * silu_grad(xhat * weight[v] + bias[v]) : dy;
  }
};

// Per channel Σ dz and Σ dz·x̂ (the bias and weight gradients of this chunk).
template <typename T, int V>
__global__ void backward_channel_sums_kernel(const T* dy, const T* x, const T* shift, const float* mean,
                                             const float* rstd, const T* weight, const T* bias, Layout l, bool silu,
                                             float* partial) {
  extern __shared__ float shared[];
  const int64_t n = blockIdx.y, c0 = first_channel<V>();
  const ChannelConstants<T, V> k(mean, rstd, shift, weight, bias, l, n, c0);
  float sum_dz[V] = {}, sum_dz_xhat[V] = {};
  for_my_rows<V>(
      l, [&](int64_t at) { return XAndGrad<T, V>{load<T, V>(x, at), load<T, V>(dy, at)}; },
      [&](int64_t, const XAndGrad<T, V>& p) {
#pragma unroll
        for (int v = 0; v < V; ++v) {
          float xhat, dz;
          k.affine_grad(v, to_float(p.x.v[v]), to_float(p.dy.v[v]), silu, xhat, dz);
          sum_dz[v] += dz;
          sum_dz_xhat[v] += dz * xhat;
        }
      });
  keep_thread_sums<V>(shared, sum_dz, sum_dz_xhat);
  write_chunk_sums<V>(shared, l, partial);
}

// From the per-sample channel sums: coef [n][groups][2], the group means of dx̂ and dx̂·x̂ (dx̂ = dz·weight,
// so a group's sums are its channels' weighted by the weight); dbias and dweight, the sums over samples.
template <typename T>
__global__ void backward_finish_kernel(const float* sums, const T* weight, Layout l, float* coef, float* dweight,
                                       float* dbias) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t stats = l.n * l.groups;
  if (i < stats) {
    const int64_t n = i / l.groups, g = i % l.groups, per_group = l.c / l.groups;
    const float* sum_dz = sums + n * 2 * l.c;
    const float* sum_dz_xhat = sum_dz + l.c;
    float a = 0.0f, b = 0.0f;
    for (int64_t ch = g * per_group; ch < (g + 1) * per_group; ++ch) {
      const float w = to_float(weight[ch]);
      a += w * sum_dz[ch];
      b += w * sum_dz_xhat[ch];
    }
    const float elements = static_cast<float>(l.hw * per_group);
    coef[2 * i] = a / elements, coef[2 * i + 1] = b / elements;
  } else if (i < stats + l.c) {
    const int64_t ch = i - stats;
    float db = 0.0f, dw = 0.0f;
    for (int64_t n = 0; n < l.n; ++n) db += sums[n * 2 * l.c + ch], dw += sums[n * 2 * l.c + l.c + ch];
    dbias[ch] = db, dweight[ch] = dw;
  }
}

// dx = rstd · (dx̂ − mean(dx̂) − x̂ · mean(dx̂·x̂)).
template <typename T, int V>
__global__ void dx_kernel(const T* dy, const T* x, const T* shift, const float* mean, const float* rstd,
                          const T* weight, const T* bias, const float* coef, Layout l, bool silu, T* dx) {
  const int64_t n = blockIdx.y, c0 = first_channel<V>();
  const ChannelConstants<T, V> k(mean, rstd, shift, weight, bias, l, n, c0);
  float mean_dxhat[V], mean_dxhat_xhat[V];
#pragma unroll
  for (int v = 0; v < V; ++v) {
    const int64_t stat = stat_index(l, n, c0 + v);
    mean_dxhat[v] = coef[2 * stat], mean_dxhat_xhat[v] = coef[2 * stat + 1];
  }
  for_my_rows<V>(
      l, [&](int64_t at) { return XAndGrad<T, V>{load<T, V>(x, at), load<T, V>(dy, at)}; },
      [&](int64_t at, const XAndGrad<T, V>& p) {
        Pack<T, V> out;
#pragma unroll
        for (int v = 0; v < V; ++v) {
          float xhat, dz;
          k.affine_grad(v, to_float(p.x.v[v]), to_float(p.dy.v[v]), silu, xhat, dz);
          out.v[v] = from_float<T>(k.rstd[v] * (dz * k.weight[v] - mean_dxhat[v] - xhat * mean_dxhat_xhat[v]));
        }
        store<T, V>(dx, at, out);
      });
}

// The shift's gradient, Σ over the pixels of dx, without reading dx: summing dx_kernel's formula over a
// channel's pixels gives rstd·(weight·Σdz − hw·mean(dx̂) − mean(dx̂·x̂)·Σx̂), and Σx̂ = rstd·hw·(channel mean −
// group mean), the channel mean from forward.
template <typename T>
__global__ void shift_grad_kernel(const float* sums, const float* coef, const float* mean, const float* rstd,
                                  const T* weight, const float* channel_means, Layout l, float* dshift) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= l.n * l.c) return;
  const int64_t n = i / l.c, ch = i % l.c, stat = stat_index(l, n, ch);
  const float sum_dz = sums[n * 2 * l.c + ch], hw = static_cast<float>(l.hw);
  const float sum_xhat = rstd[stat] * hw * (channel_means[i] - mean[stat]);
  dshift[i] = rstd[stat] * (to_float(weight[ch]) * sum_dz - hw * coef[2 * stat] - coef[2 * stat + 1] * sum_xhat);
}

}  // namespace

int64_t GroupNormShape::chunks() const { return layout_of(*this).chunks; }

int group_norm_nhwc_vector_width(int64_t c, int64_t groups, int element_bytes, const void* const* pointers,
                                 int num_pointers) {
  if (groups <= 0 || c % groups != 0) return 0;
  return widest_vector_width(c, element_bytes, pointers, num_pointers, /*narrowest=*/1);
}

int64_t group_norm_nhwc_forward_scratch(const GroupNormShape& s) { return (s.chunks() + 1) * s.n * 2 * s.c; }
int64_t group_norm_nhwc_backward_scratch(const GroupNormShape& s) {
  return (s.chunks() + 1) * s.n * 2 * s.c + 2 * s.n * s.groups;
}

void launch_group_norm_nhwc_forward(const GroupNormShape& shape, KernelDtype dtype, const void* x, const void* weight,
                                    const void* bias, double eps, bool silu, void* y, float* mean, float* rstd,
                                    const ChannelShift& shift, float* scratch, void* cuda_stream) {
  const Layout l = layout_of(shape);
  const auto stream = static_cast<cudaStream_t>(cuda_stream);
  float* partial = scratch;
  float* sums = partial + l.n * l.chunks * 2 * l.c;
  dispatch(dtype, shape.vector_width, [&]<typename T, int V>() {
    const size_t shared_bytes = chunk_shared_bytes(l, V);
    const auto* typed_x = static_cast<const T*>(x);
    const auto* typed_shift = static_cast<const T*>(shift.shift);
    channel_sums_kernel<T, V><<<chunk_grid(l), chunk_block(l), shared_bytes, stream>>>(typed_x, l, partial);
    const float* totals = add_chunks(partial, l, sums, stream);
    group_stats_kernel<T><<<blocks_for(l.n * l.groups, kSmallThreads), kSmallThreads, 0, stream>>>(
        typed_x, typed_shift, totals, l, static_cast<float>(eps), mean, rstd,
        typed_shift == nullptr ? nullptr : shift.channel_means);
    normalize_kernel<T, V><<<chunk_grid(l), chunk_block(l), 0, stream>>>(typed_x, typed_shift,
                                                                         static_cast<const T*>(weight),
                                                                         static_cast<const T*>(bias), mean, rstd, l,
                                                                         silu, static_cast<T*>(y));
  });
  check_launch("group norm forward");
}

void launch_group_norm_nhwc_backward(const GroupNormShape& shape, KernelDtype dtype, const void* dy, const void* x,
                                     const float* mean, const float* rstd, const void* weight, const void* bias,
                                     bool silu, void* dx, float* dweight, float* dbias, const ChannelShift& shift,
                                     float* scratch, void* cuda_stream) {
  const Layout l = layout_of(shape);
  const auto stream = static_cast<cudaStream_t>(cuda_stream);
  float* partial = scratch;
  float* sums = partial + l.n * l.chunks * 2 * l.c;
  float* coef = sums + l.n * 2 * l.c;
  dispatch(dtype, shape.vector_width, [&]<typename T, int V>() {
    const size_t shared_bytes = chunk_shared_bytes(l, V);
    const auto* typed_dy = static_cast<const T*>(dy);
    const auto* typed_x = static_cast<const T*>(x);
    const auto* typed_weight = static_cast<const T*>(weight);
    const auto* typed_bias = static_cast<const T*>(bias);
    const auto* typed_shift = static_cast<const T*>(shift.shift);
    backward_channel_sums_kernel<T, V><<<chunk_grid(l), chunk_block(l), shared_bytes, stream>>>(
        typed_dy, typed_x, typed_shift, mean, rstd, typed_weight, typed_bias, l, silu, partial);
    const float* totals = add_chunks(partial, l, sums, stream);
    backward_finish_kernel<T><<<blocks_for(l.n * l.groups + l.c, kSmallThreads), kSmallThreads, 0, stream>>>(
        totals, typed_weight, l, coef, dweight, dbias);
    dx_kernel<T, V><<<chunk_grid(l), chunk_block(l), 0, stream>>>(typed_dy, typed_x, typed_shift, mean, rstd,
                                                                  typed_weight, typed_bias, coef, l, silu,
                                                                  static_cast<T*>(dx));
    if (typed_shift != nullptr) {
      shift_grad_kernel<T><<<blocks_for(l.n * l.c, kSmallThreads), kSmallThreads, 0, stream>>>(
          totals, coef, mean, rstd, typed_weight, shift.channel_means, l, shift.dshift);
    }
  });
  check_launch("group norm backward");
}

}  // namespace zest
