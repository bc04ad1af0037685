// Gated residual kernels (see gated_residual.h). Forward: one thread per pack of V elements. Backward:
// block (tile, b, chunk) gives each thread one pack of columns of sample b and walks the tile's rows, so
// the gate's column sums accumulate in registers; the tiles' partial sums are added in tile order.
// Products are __fmul_rn: rounded on their own, as the op chain's product is, never fused into the add.
#include "kernels/gated_residual.h"
#include "kernels/kernel_access.cuh"

#include <algorithm>

namespace zest {
namespace {

using namespace kernels;

constexpr int kForwardThreads = 256;
constexpr int kMaxBackwardThreads = 256;
constexpr int64_t kTargetBackwardBlocks = 1024;

// The sample's gate for the pack's columns, element by element: it is a view into the modulation's
// output with no alignment to count on, and read from cache.
template <typename T, int V>
__device__ __forceinline__ void load_gate(const T* gate, float* g) {
#pragma unroll
  for (int v = 0; v < V; ++v) g[v] = to_float(gate[v]);
}

template <typename T, int V>
__global__ void forward_kernel(GatedRows r, const T* x, const T* y, const T* gate, T* out) {
  const int64_t packs_per_row = r.dim / V, packs = r.rows() * packs_per_row;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < packs;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = i / packs_per_row, col = (i % packs_per_row) * V, at = row * r.dim + col;
    const auto xs = load<T, V>(x, at);
    const auto ys = load<T, V>(y, at);
    float g[V];
    load_gate<T, V>(gate + sample_of_row(r.samples, row, r.batch, r.seq) * r.gate_stride_b + col, g);
    Pack<T, V> result;
#pragma unroll
    for (int v = 0; v < V; ++v) {
      result.v[v] = from_float<T>(to_float(xs.v[v]) + rounded<T>(__fmul_rn(to_float(ys.v[v]), g[v])));
    }
    store<T, V>(out, at, result);
  }
}

// d_y = d_out·gate (rounded); partial[b][tile][j] = Σ over the tile's rows of d_out·y, each product rounded
// as the op chain's product tensor is.
template <typename T, int V>
__global__ void backward_kernel(GatedRows r, const T* d_out, const T* y, const T* gate, T* d_y, float* partial,
                                int64_t rows_per_tile) {
  const int64_t pack = blockIdx.z * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (pack >= r.dim / V) return;
  const int64_t b = blockIdx.y, tile = blockIdx.x, tiles = gridDim.x, col = pack * V;
  float g[V], sums[V] = {};
  load_gate<T, V>(gate + b * r.gate_stride_b + col, g);
  const SampleRange sample = sample_range(r.samples, b, r.seq);
  const int64_t first = tile * rows_per_tile;
  const int64_t last = first + rows_per_tile < sample.count ? first + rows_per_tile : sample.count;
  for (int64_t s = first; s < last; ++s) {
    const int64_t at = (sample.first + s) * r.dim + col;
    const auto grads = load<T, V>(d_out, at);
    const auto ys = load<T, V>(y, at);
    Pack<T, V> dy;
#pragma unroll
    for (int v = 0; v < V; ++v) {
      const float grad = to_float(grads.v[v]);
      dy.v[v] = from_float<T>(grad * g[v]);
      sums[v] += rounded<T>(__fmul_rn(grad, to_float(ys.v[v])));
    }
    store<T, V>(d_y, at, dy);
  }
  float* out = partial + (b * tiles + tile) * r.dim + col;
#pragma unroll
  for (int v = 0; v < V; ++v) out[v] = sums[v];
}

// Threads per backward block: the row's packs rounded up to whole warps, at most kMaxBackwardThreads.
int backward_threads(int64_t packs_per_row) {
  const int64_t warps = (packs_per_row + 31) / 32;
  return static_cast<int>(std::min<int64_t>(warps * 32, kMaxBackwardThreads));
}

struct BackwardGrid {
  int threads = 0;
  int64_t chunks = 0, tiles = 0, rows_per_tile = 0;
};

BackwardGrid backward_grid(const GatedRows& r, int vector_width) {
  BackwardGrid grid;
  const int64_t packs_per_row = r.dim / vector_width;
  grid.threads = backward_threads(packs_per_row);
  grid.chunks = (packs_per_row + grid.threads - 1) / grid.threads;
  const int64_t per_sample = std::max<int64_t>(1, kTargetBackwardBlocks / std::max<int64_t>(1, r.batch * grid.chunks));
  grid.tiles = std::max<int64_t>(1, std::min(r.seq, per_sample));
  grid.rows_per_tile = (r.seq + grid.tiles - 1) / grid.tiles;
  grid.tiles = (r.seq + grid.rows_per_tile - 1) / grid.rows_per_tile;  // no empty tile
  return grid;
}

}  // namespace

int gated_residual_vector_width(int64_t dim, int element_bytes, const void* const* pointers, int num_pointers) {
  return widest_vector_width(dim, element_bytes, pointers, num_pointers, /*narrowest=*/1);
}

int64_t gated_residual_scratch(const GatedRows& rows, int vector_width) {
  return rows.batch * backward_grid(rows, vector_width).tiles * rows.dim;
}

void launch_gated_residual_forward(const GatedRows& rows, int vector_width, KernelDtype dtype, const void* x,
                                   const void* y, const void* gate, void* out, void* cuda_stream) {
  const auto stream = static_cast<cudaStream_t>(cuda_stream);
  const int64_t packs = rows.rows() * rows.dim / vector_width;
  const auto blocks =
      static_cast<unsigned>(std::min<int64_t>((packs + kForwardThreads - 1) / kForwardThreads, 1 << 30));
  dispatch(dtype, vector_width, [&]<typename T, int V>() {
    forward_kernel<T, V><<<blocks, kForwardThreads, 0, stream>>>(
        rows, static_cast<const T*>(x), static_cast<const T*>(y), static_cast<const T*>(gate), static_cast<T*>(out));
  });
  check_launch("gated residual forward");
}

void launch_gated_residual_backward(const GatedRows& rows, int vector_width, KernelDtype dtype, const void* d_out,
                                    const void* y, const void* gate, void* d_y, float* d_gate, float* scratch,
                                    void* cuda_stream) {
  const auto stream = static_cast<cudaStream_t>(cuda_stream);
  const BackwardGrid grid = backward_grid(rows, vector_width);
  const dim3 blocks(static_cast<unsigned>(grid.tiles), static_cast<unsigned>(rows.batch),
                    static_cast<unsigned>(grid.chunks));
  dispatch(dtype, vector_width, [&]<typename T, int V>() {
    backward_kernel<T, V><<<blocks, grid.threads, 0, stream>>>(rows, static_cast<const T*>(d_out),
                                                               static_cast<const T*>(y), static_cast<const T*>(gate),
                                                               static_cast<T*>(d_y), scratch, grid.rows_per_tile);
  });
  launch_sum_tile_partials(scratch, rows.batch, grid.tiles, rows.dim, d_gate, stream);
  check_launch("gated residual backward");
}

}  // namespace zest
