// Modulated layer-norm kernels (see layer_norm_modulate.h). A block takes a row at a time; with T threads, thread t
// holds the packs t, t + T, ... of V elements, so it owns the same columns in every row, and backward
// accumulates shift's and scale's column sums in registers across the rows of its tile. T is sized to the
// row (HY-Motion 1B's 1280 columns: 160 threads of one 8-element pack each); where no whole number of
// warps splits the row evenly, the last threads hold one pack fewer (or none) than the others.
#include "kernels/kernel_access.cuh"
#include "kernels/layer_norm_modulate.h"

namespace zest {
namespace {

using namespace kernels;

constexpr int kMaxThreads = 512;  // 128 registers a thread: backward holds five values per element
constexpr int kMaxWarps = kMaxThreads / 32;
constexpr int kMaxPerThread = 16;  // elements a thread holds
constexpr int64_t kTargetBackwardBlocks = 1024;

__device__ __forceinline__ float2 warp_sum(float2 v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    v.x += __shfl_xor_sync(0xffffffffu, v.x, offset);
    v.y += __shfl_xor_sync(0xffffffffu, v.y, offset);
  }
  return v;
}

// Both sums over the block (a whole number of warps), in a fixed order, returned to every thread.
// `shared` holds kMaxWarps float2.
__device__ __forceinline__ float2 block_sum(float2 v, float2* shared) {
  v = warp_sum(v);
  __syncthreads();  // the previous call's readers are done with `shared`
  if (threadIdx.x % 32 == 0) shared[threadIdx.x / 32] = v;
  __syncthreads();
  float2 total = make_float2(0.0f, 0.0f);
  for (int w = 0; w < static_cast<int>(blockDim.x / 32); ++w) total.x += shared[w].x, total.y += shared[w].y;
  return total;
}

// The packs this thread holds of a row of `vectors` packs: pack k is vector threadIdx.x + k·blockDim.x.
__device__ __forceinline__ int packs_of_thread(int64_t vectors) {
  const int64_t t = threadIdx.x, threads = blockDim.x;
  return t < vectors ? static_cast<int>((vectors - t + threads - 1) / threads) : 0;
}

// Element i of the thread's k-th pack: column (threadIdx.x + k·blockDim.x)·V + i.
template <int V>
__device__ __forceinline__ int64_t pack_column(int k) {
  return (static_cast<int64_t>(threadIdx.x) + static_cast<int64_t>(k) * blockDim.x) * V;
}

// A row's packs as loaded, not yet converted: what a thread prefetches for its next row, so that nothing
// waits on those loads before it uses them.
template <typename T, int V, int K>
struct RowPacks {
  Pack<T, V> p[K / V];
};

template <typename T, int V, int K>
__device__ __forceinline__ RowPacks<T, V, K> load_row_packs(const T* row, int packs) {
  RowPacks<T, V, K> out{};
#pragma unroll
  for (int k = 0; k < K / V; ++k) {
    if (k < packs) out.p[k] = load<T, V>(row, pack_column<V>(k));
  }
  return out;
}

template <typename T, int V, int K>
__device__ __forceinline__ void to_floats(const RowPacks<T, V, K>& row, float* v) {
#pragma unroll
  for (int k = 0; k < K / V; ++k) {
#pragma unroll
    for (int i = 0; i < V; ++i) v[k * V + i] = to_float(row.p[k].v[i]);
  }
}

// Stores value(e) for the thread's elements e of a row, pack by pack.
template <typename T, int V, int K, typename Value>
__device__ __forceinline__ void store_row(T* row, int packs, Value value) {
#pragma unroll
  for (int k = 0; k < K / V; ++k) {
    if (k >= packs) break;
    Pack<T, V> out;
#pragma unroll
    for (int i = 0; i < V; ++i) out.v[i] = from_float<T>(value(k * V + i));
    store<T, V>(row, pack_column<V>(k), out);
  }
}

// A sample's shift or scale for the thread's columns, element by element: they are views into the
// modulation's output with no alignment to count on, and read once per row from cache.
template <typename T, int V, int K>
__device__ __forceinline__ void load_modulation(const T* m, int packs, float* v) {
#pragma unroll
  for (int k = 0; k < K / V; ++k) {
    if (k >= packs) break;
#pragma unroll
    for (int i = 0; i < V; ++i) v[k * V + i] = to_float(m[pack_column<V>(k) + i]);
  }
}

// The multiplier of the thread's columns: (1 + scale) in the activation dtype, as `1 + scale` computes it, or
// the affine weight as it is.
template <typename T, int V, int K>
__device__ __forceinline__ void load_multiplier(const T* scale, int packs, bool affine, float* multiplier) {
  load_modulation<T, V, K>(scale, packs, multiplier);
  if (affine) return;
#pragma unroll
  for (int e = 0; e < K; ++e) multiplier[e] = rounded<T>(1.0f + multiplier[e]);
}

// K: the elements a thread holds (packs · V), a template parameter so that registers are sized to the row.
// A block takes rows blockIdx.x, + gridDim.x, ... (one wave of blocks: a block per row spent more on
// starting blocks than on the bytes), with the next row's x and this row's shift and scale in flight
// while this row's sums are taken.
template <typename T, int V, int K>
__global__ void __launch_bounds__(kMaxThreads) forward_kernel(ModulatedRows r, const T* x, const T* shift,
                                                           const T* scale, float eps, T* y, float* mean_out,
                                                           float* rstd_out) {
  __shared__ float2 shared[kMaxWarps];
  const int packs = packs_of_thread(r.dim / V);
  const float inv_dim = 1.0f / static_cast<float>(r.dim);
  const int64_t rows = r.rows();
  RowPacks<T, V, K> ahead{};
  if (blockIdx.x < rows) ahead = load_row_packs<T, V, K>(x + blockIdx.x * r.dim, packs);
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t b = sample_of_row(r.samples, row, r.batch, r.seq);
    float multiplier[K], shifted[K];
    load_multiplier<T, V, K>(scale + b * r.scale_stride_b, packs, r.affine, multiplier);
    load_modulation<T, V, K>(shift + b * r.shift_stride_b, packs, shifted);
    float v[K];
    to_floats<T, V, K>(ahead, v);
    if (row + gridDim.x < rows) ahead = load_row_packs<T, V, K>(x + (row + gridDim.x) * r.dim, packs);
    float sum = 0.0f;
#pragma unroll
    for (int e = 0; e < K; ++e) sum += e < packs * V ? v[e] : 0.0f;
    const float mean = block_sum(make_float2(sum, 0.0f), shared).x * inv_dim;
    float squares = 0.0f;
#pragma unroll
    for (int e = 0; e < K; ++e) squares += e < packs * V ? (v[e] - mean) * (v[e] - mean) : 0.0f;
    const float rstd = rsqrtf(block_sum(make_float2(squares, 0.0f), shared).x * inv_dim + eps);
    if (threadIdx.x == 0) mean_out[row] = mean, rstd_out[row] = rstd;
    store_row<T, V, K>(y + row * r.dim, packs,
                       [&](int e) { return (v[e] - mean) * rstd * multiplier[e] + shifted[e]; });
  }
}

// Per row, with ĝ = dy·multiplier (1 + scale, or the affine weight) and n = (x − mean)·rstd:
// dx = rstd·(ĝ − Σĝ/dim − n·Σ(ĝ·n)/dim).
// Block (tile, b) takes rows tile·rows_per_tile ... of sample b and writes its column sums of dy (shift's
// gradient) and dy·n (scale's) to partial[0 or 1][b][tile][dim].
// The next row's dy and x are loaded (as packs, converted only when their row comes) before this row's
// sums, so that their latency overlaps the block's reductions.
template <typename T, int V, int K>
__global__ void __launch_bounds__(kMaxThreads) backward_kernel(ModulatedRows r, const T* dy, const T* x,
                                                            const T* scale, const float* mean, const float* rstd,
                                                            T* dx, float* partial, int64_t rows_per_tile) {
  __shared__ float2 shared[kMaxWarps];
  const int packs = packs_of_thread(r.dim / V);
  const float inv_dim = 1.0f / static_cast<float>(r.dim);
  const int64_t b = blockIdx.y, tile = blockIdx.x, tiles = gridDim.x;
  float multiplier[K], dshift[K] = {}, dscale[K] = {};
  load_multiplier<T, V, K>(scale + b * r.scale_stride_b, packs, r.affine, multiplier);
  const SampleRange sample = sample_range(r.samples, b, r.seq);
  const int64_t first = tile * rows_per_tile;
  const int64_t last = first + rows_per_tile < sample.count ? first + rows_per_tile : sample.count;
  RowPacks<T, V, K> g_ahead{}, n_ahead{};
  if (first < last) {
    g_ahead = load_row_packs<T, V, K>(dy + (sample.first + first) * r.dim, packs);
    n_ahead = load_row_packs<T, V, K>(x + (sample.first + first) * r.dim, packs);
  }
  for (int64_t s = first; s < last; ++s) {
    const int64_t row = sample.first + s;
    float g[K], n[K];
    to_floats<T, V, K>(g_ahead, g);
    to_floats<T, V, K>(n_ahead, n);
    if (s + 1 < last) {
      g_ahead = load_row_packs<T, V, K>(dy + (row + 1) * r.dim, packs);
      n_ahead = load_row_packs<T, V, K>(x + (row + 1) * r.dim, packs);
    }
    const float row_mean = mean[row], row_rstd = rstd[row];
    float2 sums = make_float2(0.0f, 0.0f);
#pragma unroll
    for (int e = 0; e < K; ++e) {
      if (e >= packs * V) break;
      n[e] = (n[e] - row_mean) * row_rstd;
      dshift[e] += g[e];
      dscale[e] += g[e] * n[e];
      g[e] *= multiplier[e];
      sums.x += g[e];
      sums.y += g[e] * n[e];
    }
    sums = block_sum(sums, shared);
    const float g_mean = sums.x * inv_dim, gn_mean = sums.y * inv_dim;
    store_row<T, V, K>(dx + row * r.dim, packs, [&](int e) { return row_rstd * (g[e] - g_mean - n[e] * gn_mean); });
  }
  const int64_t stride = r.batch * tiles * r.dim;  // partial[1] after partial[0]
  float* out = partial + (b * tiles + tile) * r.dim;
#pragma unroll
  for (int k = 0; k < K / V; ++k) {
    if (k >= packs) break;
#pragma unroll
    for (int i = 0; i < V; ++i) {
      out[pack_column<V>(k) + i] = dshift[k * V + i];
      out[stride + pack_column<V>(k) + i] = dscale[k * V + i];
    }
  }
}

int64_t backward_tiles(const ModulatedRows& r) {
  const int64_t per_sample = (kTargetBackwardBlocks + r.batch - 1) / std::max<int64_t>(1, r.batch);
  return std::max<int64_t>(1, std::min(r.seq, per_sample));
}

// How a row is spread over a block: `threads` (whole warps, at most kMaxThreads) each holding packs of
// `width` elements, at most kMaxPerThread elements a thread. threads = 0: no such split.
struct RowLayout {
  int width = 0, threads = 0;
};

// An even split over whole warps first (every thread busy); else the fewest packs a thread with the
// threads rounded up to whole warps, the last ones holding less.
RowLayout layout_for(int64_t dim, int width) {
  if (dim <= 0 || dim % width != 0) return {};
  const int64_t vectors = dim / width;
  for (int packs = 1; packs * width <= kMaxPerThread; ++packs) {
    const int64_t threads = vectors % packs == 0 ? vectors / packs : 0;
    if (threads > 0 && threads % 32 == 0 && threads <= kMaxThreads) return {width, static_cast<int>(threads)};
  }
  for (int packs = 1; packs * width <= kMaxPerThread; ++packs) {
    const int64_t threads = (vectors + packs - 1) / packs;
    const int64_t warps_threads = (threads + 31) / 32 * 32;
    if (warps_threads <= kMaxThreads) return {width, static_cast<int>(warps_threads)};
  }
  return {};
}

// The most packs a thread holds.
int packs_per_thread(int64_t dim, const RowLayout& layout) {
  const int64_t vectors = dim / layout.width;
  return static_cast<int>((vectors + layout.threads - 1) / layout.threads);
}

// Calls fn.template operator()<K>() with K = the elements a thread holds for at most `packs` packs of V:
// V or 2V (HY-Motion's rows), else kMaxPerThread, the kernels' runtime guards stopping at the thread's own
// pack count.
template <int V, typename Fn>
void with_elements_per_thread(int packs, Fn&& fn) {
  static_assert(2 * V <= kMaxPerThread, "a pack is at most 16 bytes: 8 16-bit elements");
  if (packs == 1) {
    fn.template operator()<V>();
  } else if (packs == 2) {
    fn.template operator()<2 * V>();
  } else {
    fn.template operator()<kMaxPerThread>();
  }
}

// The widest pack (8, 4, 2, 1 elements, at most 16 bytes) that splits a row over whole warps, with every
// row pointer aligned to it (shift and scale are read element by element).
RowLayout row_layout(const ModulatedRows& r, int element_bytes, std::initializer_list<const void*> pointers) {
  const void* ptrs[8];
  int count = 0;
  for (const void* p : pointers) ptrs[count++] = p;
  for (const int width : {8, 4, 2, 1}) {
    const RowLayout layout = layout_for(r.dim, width);
    if (layout.threads > 0 && width * element_bytes <= 16 &&
        widest_vector_width(width, element_bytes, ptrs, count, width) == width) {
      return layout;
    }
  }
  return layout_for(r.dim, 1);
}

}  // namespace

bool layer_norm_modulate_covers(int64_t dim) { return dim > 0 && layout_for(dim, 1).threads > 0; }

int64_t layer_norm_modulate_scratch(const ModulatedRows& rows) {
  return 2 * rows.batch * backward_tiles(rows) * rows.dim;
}

void launch_layer_norm_modulate_forward(const ModulatedRows& rows, KernelDtype dtype, const void* x,
                                        const void* shift, const void* scale, double eps, void* y, float* mean,
                                        float* rstd, void* cuda_stream) {
  const auto stream = static_cast<cudaStream_t>(cuda_stream);
  const int element_bytes = dtype == KernelDtype::fp32 ? 4 : 2;
  const RowLayout layout = row_layout(rows, element_bytes, {x, y});
  const int packs = packs_per_thread(rows.dim, layout);
  dispatch(dtype, layout.width, [&]<typename T, int V>() {
    with_elements_per_thread<V>(packs, [&]<int K>() {
      const auto blocks = static_cast<unsigned>(
          std::max<int64_t>(1, std::min(rows.rows(), one_wave_blocks<forward_kernel<T, V, K>>(layout.threads))));
      forward_kernel<T, V, K><<<blocks, layout.threads, 0, stream>>>(
          rows, static_cast<const T*>(x), static_cast<const T*>(shift), static_cast<const T*>(scale),
          static_cast<float>(eps), static_cast<T*>(y), mean, rstd);
    });
  });
  check_launch("modulated layer norm forward");
}

void launch_layer_norm_modulate_backward(const ModulatedRows& rows, KernelDtype dtype, const void* dy,
                                         const void* x, const void* scale, const float* mean, const float* rstd,
                                         void* dx, float* dshift_dscale, float* scratch, void* cuda_stream) {
  const auto stream = static_cast<cudaStream_t>(cuda_stream);
  const int element_bytes = dtype == KernelDtype::fp32 ? 4 : 2;
  const RowLayout layout = row_layout(rows, element_bytes, {dy, x, dx});
  const int packs = packs_per_thread(rows.dim, layout);
  dispatch(dtype, layout.width, [&]<typename T, int V>() {
    with_elements_per_thread<V>(packs, [&]<int K>() {
      constexpr auto kernel = backward_kernel<T, V, K>;
      // Tiles for one wave of blocks where the batch allows (a second, partial wave leaves most SMs waiting),
      // never more than layer_norm_modulate_scratch counted.
      const int64_t wave = one_wave_blocks<kernel>(layout.threads);
      const int64_t per_sample = std::max<int64_t>(1, wave / std::max<int64_t>(1, rows.batch));
      const int64_t tiles = std::min(backward_tiles(rows), per_sample);
      const int64_t rows_per_tile = (rows.seq + tiles - 1) / tiles;
      const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(rows.batch));
      kernel<<<grid, layout.threads, 0, stream>>>(rows, static_cast<const T*>(dy), static_cast<const T*>(x),
                                                  static_cast<const T*>(scale), mean, rstd, static_cast<T*>(dx),
                                                  scratch, rows_per_tile);
      // partial[0] and partial[1] are [batch][tiles][dim] each: 2·batch groups, giving [2][batch][dim].
      launch_sum_tile_partials(scratch, 2 * rows.batch, tiles, rows.dim, dshift_dscale, stream);
    });
  });
  check_launch("modulated layer norm backward");
}

}  // namespace zest
