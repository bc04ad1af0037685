// The block-sparse attention's kernels (see block_sparse_attention.h): the tile map, a flash-style forward
// (one block of four warps per 64 queries of a head, each warp 16 queries) and a backward (one block per 64
// keys of a head, each warp 16 keys), on tensor cores through mma.sync m16n8k16 with float32 sums. Tiles come
// into shared memory by cp.async, the next one while this one is computed; rows are padded by 8 elements so
// that ldmatrix's eight row addresses fall in distinct banks.
#include "kernels/block_sparse_attention.h"

#include "kernels/kernel_access.cuh"

#include <cmath>
#include <stdexcept>
#include <string>

namespace zest {
namespace {

using kernels::check_launch;

constexpr int kTile = static_cast<int>(kAttentionTile);
constexpr int kThreads = 128;  // four warps
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kInf = __builtin_huge_valf();

// ---------------------------------------------------------------------------------------------------
// Tensor-core and copy primitives

template <typename T>
__device__ __forceinline__ void mma_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Four 8 × 8 matrices of 16-bit elements; lanes 8i..8i+7 give matrix i's row addresses.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(row)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(row)));
}

// 16 bytes from global to shared, zeros where !valid (src is then not read).
__device__ __forceinline__ void copy_16_async(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared_address(dst)), "l"(src),
               "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void copy_4_async(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(shared_address(dst)), "l"(src),
               "r"(valid ? 4 : 0));
}
__device__ __forceinline__ void commit_copies() { asm volatile("cp.async.commit_group;\n" ::); }
template <int Pending>
__device__ __forceinline__ void wait_copies() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(Pending));
}

template <typename T>
__device__ __forceinline__ uint32_t pack_pair(float lo, float hi) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  } else {
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
}

// The A operand of a 16 × 16 chunk (columns 16j..16j+15) from a 16 × 64 accumulator held as eight 16 × 8 tiles:
// an accumulator's layout per thread is the A operand's, so scores become the next product's input in registers.
template <typename T>
__device__ __forceinline__ void accumulator_as_a(uint32_t (&a)[4], const float (&acc)[8][4], int j) {
  a[0] = pack_pair<T>(acc[2 * j][0], acc[2 * j][1]);
  a[1] = pack_pair<T>(acc[2 * j][2], acc[2 * j][3]);
  a[2] = pack_pair<T>(acc[2 * j + 1][0], acc[2 * j + 1][1]);
  a[3] = pack_pair<T>(acc[2 * j + 1][2], acc[2 * j + 1][3]);
}

// ---------------------------------------------------------------------------------------------------
// Shared-memory tiles: 64 rows of D (a multiple of 16) elements, each row padded by 8.

template <int D>
constexpr int kPitch = D + 8;
template <int D>
constexpr int kTileElements = kTile * kPitch<D>;

// Rows [0, rows) of a [*, head_dim] operand whose rows are row_stride apart; zeros beyond rows and head_dim.
template <typename T, int D>
__device__ __forceinline__ void load_rows_async(T* tile, const T* first_row, int64_t row_stride, int rows,
                                                int head_dim) {
  constexpr int kChunks = D / 8;
  for (int i = threadIdx.x; i < kTile * kChunks; i += kThreads) {
    const int r = i / kChunks, c = i % kChunks;
    const bool valid = r < rows && c * 8 < head_dim;
    copy_16_async(tile + r * kPitch<D> + c * 8, valid ? first_row + r * row_stride + c * 8 : first_row, valid);
  }
}

// A operand rows 16 × 16 (rows r0.., columns c0..) of a row-major tile.
template <int D, typename T>
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const T* tile, int r0, int c0, int lane) {
  ldmatrix_x4(a, tile + (r0 + lane % 16) * kPitch<D> + c0 + (lane / 16) * 8);
}
// B operands of two n-tiles (rows n0..n0+15 of the tile are the n index, columns c0..c0+15 the k index):
// b[0], b[1] for rows n0..n0+7, b[2], b[3] for n0+8..n0+15.
template <int D, typename T>
__device__ __forceinline__ void load_b_rows(uint32_t (&b)[4], const T* tile, int n0, int c0, int lane) {
  ldmatrix_x4(b, tile + (n0 + lane % 8 + (lane / 16) * 8) * kPitch<D> + c0 + ((lane / 8) % 2) * 8);
}
// B operands of two n-tiles where the tile's rows are the k index (k0..k0+15) and columns the n index
// (n0..n0+15): b[0], b[1] for columns n0..n0+7, b[2], b[3] for n0+8..n0+15.
template <int Pitch, typename T>
__device__ __forceinline__ void load_b_columns(uint32_t (&b)[4], const T* tile, int k0, int n0, int lane) {
  ldmatrix_x4_trans(b, tile + (k0 + lane % 8 + ((lane / 8) % 2) * 8) * Pitch + n0 + (lane / 16) * 8);
}

__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

struct Operands {
  int64_t batch, heads, q_len, k_len, head_dim, q_tiles, k_tiles;
  AttentionStrides q, k, v, grad_out;
  int64_t bias_batch_stride;
  bool shared_bias;
  float scale_log2;  // log2(e)/√d: scores in base 2
};

Operands operands_of(const BlockSparseAttentionShape& s, int64_t bias_batches) {
  return {s.batch,  s.heads, s.q_len, s.k_len, s.head_dim,           s.q_tiles(), s.k_tiles(),
          s.q,      s.k,     s.v,     s.grad_out, s.bias_batch_stride, bias_batches == 1,
          kLog2e / std::sqrt(static_cast<float>(s.head_dim))};
}

__device__ __forceinline__ const uint8_t* map_of(const uint8_t* map, const Operands& p, int64_t b) {
  return map + (p.shared_bias ? 0 : b) * p.q_tiles * p.k_tiles;
}

// ---------------------------------------------------------------------------------------------------
// Tile map

template <typename T>
__global__ void __launch_bounds__(256) tile_map_kernel(Operands p, const T* bias, uint8_t* map) {
  const int64_t kt = blockIdx.x, qt = blockIdx.y, b = blockIdx.z;
  const T* sample = bias + b * p.bias_batch_stride;
  bool any_open = false, any_nonzero = false;
  for (int e = threadIdx.x; e < kTile * kTile; e += blockDim.x) {
    const int64_t row = qt * kTile + e / kTile, col = kt * kTile + e % kTile;
    if (row >= p.q_len || col >= p.k_len) continue;
    const float value = kernels::to_float(sample[row * p.k_len + col]);
    any_open = any_open || value != -kInf;
    any_nonzero = any_nonzero || value != 0.0f;
  }
  any_open = __syncthreads_or(any_open);
  any_nonzero = __syncthreads_or(any_nonzero);
  if (threadIdx.x != 0) return;
  const auto tile = !any_open ? AttentionTile::closed : !any_nonzero ? AttentionTile::zero_bias : AttentionTile::mixed;
  map[(b * p.q_tiles + qt) * p.k_tiles + kt] = static_cast<uint8_t>(tile);
}

// The rows of a tile that starts at `first` of `length`.
__device__ __forceinline__ int rows_from(int64_t length, int64_t first) {
  return static_cast<int>(length - first < kTile ? length - first : kTile);
}

// The first tile at or after `from` in a row (forward: key tiles of a query tile) or column (backward: query
// tiles of a key tile) of the map that the bias leaves open; `count` when none is left.
__device__ __forceinline__ int64_t next_open(const uint8_t* map, int64_t step, int64_t from, int64_t count) {
  while (from < count && map[from * step] == static_cast<uint8_t>(AttentionTile::closed)) ++from;
  return from;
}

// The bias of scores (row, col) in base 2, or −inf beyond the lengths (keys there are padding of the tile).
template <typename T>
__device__ __forceinline__ float bias_log2(const T* bias, const Operands& p, int64_t row, int64_t col) {
  if (row >= p.q_len || col >= p.k_len) return -kInf;
  return kernels::to_float(bias[row * p.k_len + col]) * kLog2e;
}

// ---------------------------------------------------------------------------------------------------
// Forward: block (query tile, head, sample)

template <int D>
constexpr int kForwardSharedBytes = 5 * kTileElements<D> * 2;  // q, then k and v for two stages

template <typename T, int D>
__global__ void __launch_bounds__(kThreads) attention_forward(Operands p, const T* q, const T* k, const T* v,
                                                              const T* bias, const uint8_t* map, T* out,
                                                              float* log_sum_exp) {
  extern __shared__ __align__(16) unsigned char shared_bytes[];
  T* const q_tile = reinterpret_cast<T*>(shared_bytes);
  // Stage s's key tile is tile 1 + s, its value tile 3 + s (offsets, not an array a runtime index would put on the stack).
  auto k_tiles = [q_tile](int s) { return q_tile + (1 + s) * kTileElements<D>; };
  auto v_tiles = [q_tile](int s) { return q_tile + (3 + s) * kTileElements<D>; };

  const int64_t qt = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t q0 = qt * kTile;
  const uint8_t* const map_row = map_of(map, p, b) + qt * p.k_tiles;
  const T* const sample_bias = bias + (p.shared_bias ? 0 : b) * p.bias_batch_stride;
  const T* const k_head = k + b * p.k.batch + h * p.k.head;
  const T* const v_head = v + b * p.v.batch + h * p.v.head;
  auto load_keys = [&](int64_t kt, int stage) {
    const int rows = rows_from(p.k_len, kt * kTile);
    load_rows_async<T, D>(k_tiles(stage), k_head + kt * kTile * p.k.seq, p.k.seq, rows, p.head_dim);
    load_rows_async<T, D>(v_tiles(stage), v_head + kt * kTile * p.v.seq, p.v.seq, rows, p.head_dim);
  };

  load_rows_async<T, D>(q_tile, q + b * p.q.batch + q0 * p.q.seq + h * p.q.head, p.q.seq,
                        rows_from(p.q_len, q0), p.head_dim);
  commit_copies();
  int64_t kt = next_open(map_row, 1, 0, p.k_tiles);
  if (kt < p.k_tiles) load_keys(kt, 0);
  commit_copies();
  wait_copies<1>();
  __syncthreads();
  uint32_t q_frag[D / 16][4];
#pragma unroll
  for (int c = 0; c < D / 16; ++c) load_a<D>(q_frag[c], q_tile, warp * 16, c * 16, lane);

  float o[D / 8][4] = {};
  float row_max[2] = {-kInf, -kInf}, row_sum[2] = {0.0f, 0.0f};
  int stage = 0;
  while (kt < p.k_tiles) {
    const int64_t next = next_open(map_row, 1, kt + 1, p.k_tiles);
    if (next < p.k_tiles) load_keys(next, stage ^ 1);
    commit_copies();
    wait_copies<1>();
    __syncthreads();

    float s[8][4] = {};
#pragma unroll
    for (int c = 0; c < D / 16; ++c) {
#pragma unroll
      for (int n = 0; n < 4; ++n) {
        uint32_t kb[4];
        load_b_rows<D>(kb, k_tiles(stage), n * 16, c * 16, lane);
        mma_16816<T>(s[2 * n], q_frag[c], kb[0], kb[1]);
        mma_16816<T>(s[2 * n + 1], q_frag[c], kb[2], kb[3]);
      }
    }
    const int64_t k0 = kt * kTile;
    const bool mixed = map_row[kt] == static_cast<uint8_t>(AttentionTile::mixed);
    const bool last_keys = k0 + kTile > p.k_len;
    float tile_max[2] = {-kInf, -kInf};
#pragma unroll
    for (int n = 0; n < 8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t row = q0 + warp * 16 + lane / 4 + (e / 2) * 8, col = k0 + n * 8 + (lane % 4) * 2 + e % 2;
        float x = s[n][e] * p.scale_log2;
        if (mixed) x += bias_log2(sample_bias, p, row, col);
        else if (last_keys && col >= p.k_len) x = -kInf;
        s[n][e] = x;
        tile_max[e / 2] = fmaxf(tile_max[e / 2], x);
      }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float new_max = fmaxf(row_max[r], quad_max(tile_max[r]));
      // A row with nothing open yet keeps −inf; exp2 of (−inf − 0) is then 0 rather than NaN.
      const float base = new_max == -kInf ? 0.0f : new_max;
      const float rescale = exp2f(row_max[r] - base);
      row_max[r] = new_max;
      row_sum[r] *= rescale;
#pragma unroll
      for (int n = 0; n < D / 8; ++n) {
        o[n][2 * r] *= rescale;
        o[n][2 * r + 1] *= rescale;
      }
#pragma unroll
      for (int n = 0; n < 8; ++n) {
        s[n][2 * r] = exp2f(s[n][2 * r] - base);
        s[n][2 * r + 1] = exp2f(s[n][2 * r + 1] - base);
        row_sum[r] += s[n][2 * r] + s[n][2 * r + 1];
      }
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      uint32_t pa[4];
      accumulator_as_a<T>(pa, s, j);
#pragma unroll
      for (int c = 0; c < D / 16; ++c) {
        uint32_t vb[4];
        load_b_columns<kPitch<D>>(vb, v_tiles(stage), j * 16, c * 16, lane);
        mma_16816<T>(o[2 * c], pa, vb[0], vb[1]);
        mma_16816<T>(o[2 * c + 1], pa, vb[2], vb[3]);
      }
    }
    __syncthreads();  // every warp is done with this stage before the next iteration loads into it
    stage ^= 1;
    kt = next;
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float total = quad_sum(row_sum[r]);
    const int64_t row = q0 + warp * 16 + lane / 4 + r * 8;
    if (row >= p.q_len) continue;
    const float inverse = total > 0.0f ? 1.0f / total : 0.0f;
    T* const out_row = out + ((b * p.q_len + row) * p.heads + h) * p.head_dim;
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      const int col = n * 8 + (lane % 4) * 2;
      if (col < p.head_dim) {
        *reinterpret_cast<uint32_t*>(out_row + col) = pack_pair<T>(o[n][2 * r] * inverse, o[n][2 * r + 1] * inverse);
      }
    }
    // +inf for a row the bias closes whole: the backward's probabilities exp2(s − lse) are then 0.
    if (lane % 4 == 0) log_sum_exp[(b * p.heads + h) * p.q_len + row] = total > 0.0f ? row_max[r] + log2f(total) : kInf;
  }
}

// ---------------------------------------------------------------------------------------------------
// Backward

// row_dot[b, h, i] = Σ_d dO·O over one row (the softmax backward's per-row term): a warp per row.
template <typename T>
__global__ void __launch_bounds__(256) row_dot_kernel(Operands p, const T* out, const T* grad_out, float* row_dot) {
  const int64_t rows = p.batch * p.q_len * p.heads;
  const int lane = threadIdx.x % 32;
  for (int64_t r = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) / 32; r < rows;
       r += gridDim.x * int64_t{blockDim.x} / 32) {
    const int64_t h = r % p.heads, i = (r / p.heads) % p.q_len, b = r / (p.heads * p.q_len);
    const T* const o = out + r * p.head_dim;
    const T* const g = grad_out + b * p.grad_out.batch + i * p.grad_out.seq + h * p.grad_out.head;
    float sum = 0.0f;
    for (int64_t d = lane; d < p.head_dim; d += 32) sum += kernels::to_float(o[d]) * kernels::to_float(g[d]);
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    if (lane == 0) row_dot[(b * p.heads + h) * p.q_len + i] = sum;
  }
}

template <typename T>
__global__ void __launch_bounds__(256) round_dq_kernel(int64_t count, const float* dq_sum, T* dq) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count; i += gridDim.x * int64_t{blockDim.x}) {
    dq[i] = kernels::from_float<T>(dq_sum[i]);
  }
}

constexpr int kScorePitch = kTile + 8;  // dSᵀ tile [64 keys][64 queries], padded

template <int D>
constexpr int kBackwardSharedBytes = (6 * kTileElements<D> + kTile * kScorePitch) * 2 + 4 * kTile * 4;

// Block (key tile, head, sample); warp w owns keys 16w..16w+15 of the tile and sums their dK and dV in
// registers over the open query tiles. Per query tile: Sᵀ = K·Qᵀ, Pᵀ = exp2(Sᵀ − lse), dV += Pᵀ·dO,
// dPᵀ = V·dOᵀ, dSᵀ = Pᵀ∘(dPᵀ − row_dot), dK += dSᵀ·Q; dSᵀ goes through shared memory so that warp w can add
// dQ of queries 16w..16w+15 (dS·K) into the float32 sums.
template <typename T, int D>
__global__ void __launch_bounds__(kThreads) attention_backward(Operands p, const T* q, const T* k, const T* v,
                                                               const T* bias, const uint8_t* map, const T* grad_out,
                                                               const float* log_sum_exp, const float* row_dot,
                                                               float* dq_sum, T* dk, T* dv) {
  extern __shared__ __align__(16) unsigned char shared_bytes[];
  T* const k_tile = reinterpret_cast<T*>(shared_bytes);
  T* const v_tile = k_tile + kTileElements<D>;
  auto q_tiles = [k_tile](int s) { return k_tile + (2 + s) * kTileElements<D>; };
  auto go_tiles = [k_tile](int s) { return k_tile + (4 + s) * kTileElements<D>; };
  T* const score_tile = k_tile + 6 * kTileElements<D>;
  float* const lse_tiles = reinterpret_cast<float*>(score_tile + kTile * kScorePitch);  // [2][64]
  float* const dot_tiles = lse_tiles + 2 * kTile;                                      // [2][64]

  const int64_t kt = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t k0 = kt * kTile;
  const uint8_t* const map_column = map_of(map, p, b) + kt;
  const T* const sample_bias = bias + (p.shared_bias ? 0 : b) * p.bias_batch_stride;
  const T* const q_head = q + b * p.q.batch + h * p.q.head;
  const T* const go_head = grad_out + b * p.grad_out.batch + h * p.grad_out.head;
  const float* const lse_head = log_sum_exp + (b * p.heads + h) * p.q_len;
  const float* const dot_head = row_dot + (b * p.heads + h) * p.q_len;
  auto load_queries = [&](int64_t qt, int stage) {
    const int rows = rows_from(p.q_len, qt * kTile);
    load_rows_async<T, D>(q_tiles(stage), q_head + qt * kTile * p.q.seq, p.q.seq, rows, p.head_dim);
    load_rows_async<T, D>(go_tiles(stage), go_head + qt * kTile * p.grad_out.seq, p.grad_out.seq, rows, p.head_dim);
    const int i = threadIdx.x % kTile;
    const bool valid = i < rows;
    const int64_t at = valid ? qt * kTile + i : 0;
    if (threadIdx.x < kTile) copy_4_async(lse_tiles + stage * kTile + i, lse_head + at, valid);
    else copy_4_async(dot_tiles + stage * kTile + i, dot_head + at, valid);
  };

  const int key_rows = rows_from(p.k_len, k0);
  load_rows_async<T, D>(k_tile, k + b * p.k.batch + k0 * p.k.seq + h * p.k.head, p.k.seq, key_rows, p.head_dim);
  load_rows_async<T, D>(v_tile, v + b * p.v.batch + k0 * p.v.seq + h * p.v.head, p.v.seq, key_rows, p.head_dim);
  int64_t qt = next_open(map_column, p.k_tiles, 0, p.q_tiles);
  if (qt < p.q_tiles) load_queries(qt, 0);
  commit_copies();

  float dk_sum[D / 8][4] = {}, dv_sum[D / 8][4] = {};
  int stage = 0;
  while (qt < p.q_tiles) {
    const int64_t next = next_open(map_column, p.k_tiles, qt + 1, p.q_tiles);
    if (next < p.q_tiles) load_queries(next, stage ^ 1);
    commit_copies();
    wait_copies<1>();
    __syncthreads();
    const T* const q_now = q_tiles(stage);
    const T* const go_now = go_tiles(stage);
    const float* const lse_now = lse_tiles + stage * kTile;
    const float* const dot_now = dot_tiles + stage * kTile;

    // Sᵀ and dPᵀ for this warp's 16 keys × 64 queries.
    float st[8][4] = {}, dpt[8][4] = {};
#pragma unroll
    for (int c = 0; c < D / 16; ++c) {
      uint32_t ka[4], va[4];
      load_a<D>(ka, k_tile, warp * 16, c * 16, lane);
      load_a<D>(va, v_tile, warp * 16, c * 16, lane);
#pragma unroll
      for (int n = 0; n < 4; ++n) {
        uint32_t qb[4], gb[4];
        load_b_rows<D>(qb, q_now, n * 16, c * 16, lane);
        load_b_rows<D>(gb, go_now, n * 16, c * 16, lane);
        mma_16816<T>(st[2 * n], ka, qb[0], qb[1]);
        mma_16816<T>(st[2 * n + 1], ka, qb[2], qb[3]);
        mma_16816<T>(dpt[2 * n], va, gb[0], gb[1]);
        mma_16816<T>(dpt[2 * n + 1], va, gb[2], gb[3]);
      }
    }
    const int64_t q0 = qt * kTile;
    const bool mixed = map_column[qt * p.k_tiles] == static_cast<uint8_t>(AttentionTile::mixed);
    const bool edge = q0 + kTile > p.q_len || k0 + kTile > p.k_len;
#pragma unroll
    for (int n = 0; n < 8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = warp * 16 + lane / 4 + (e / 2) * 8, query = n * 8 + (lane % 4) * 2 + e % 2;
        float x = st[n][e] * p.scale_log2;
        if (mixed) x += bias_log2(sample_bias, p, q0 + query, k0 + key);
        float prob = exp2f(x - lse_now[query]);
        if (edge && (q0 + query >= p.q_len || k0 + key >= p.k_len)) prob = 0.0f;
        st[n][e] = prob;                                  // Pᵀ
        dpt[n][e] = prob * (dpt[n][e] - dot_now[query]);  // dSᵀ
      }
    }
    // dV += Pᵀ·dO and dK += dSᵀ·Q (queries are the k index: dO and Q tiles read by columns).
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      uint32_t pa[4], sa[4];
      accumulator_as_a<T>(pa, st, j);
      accumulator_as_a<T>(sa, dpt, j);
#pragma unroll
      for (int c = 0; c < D / 16; ++c) {
        uint32_t gb[4], qb[4];
        load_b_columns<kPitch<D>>(gb, go_now, j * 16, c * 16, lane);
        load_b_columns<kPitch<D>>(qb, q_now, j * 16, c * 16, lane);
        mma_16816<T>(dv_sum[2 * c], pa, gb[0], gb[1]);
        mma_16816<T>(dv_sum[2 * c + 1], pa, gb[2], gb[3]);
        mma_16816<T>(dk_sum[2 * c], sa, qb[0], qb[1]);
        mma_16816<T>(dk_sum[2 * c + 1], sa, qb[2], qb[3]);
      }
    }
    // dSᵀ, rounded as the products above took it, into shared memory for dQ.
#pragma unroll
    for (int n = 0; n < 8; ++n) {
      const int key = warp * 16 + lane / 4, query = n * 8 + (lane % 4) * 2;
      *reinterpret_cast<uint32_t*>(score_tile + key * kScorePitch + query) = pack_pair<T>(dpt[n][0], dpt[n][1]);
      *reinterpret_cast<uint32_t*>(score_tile + (key + 8) * kScorePitch + query) = pack_pair<T>(dpt[n][2], dpt[n][3]);
    }
    __syncthreads();
    // dQ of queries 16w..16w+15 = dS·K: dS's rows from dSᵀ's columns (transposed loads), K read by columns.
    float dq_part[D / 8][4] = {};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      uint32_t sa[4];
      ldmatrix_x4_trans(sa, score_tile + (j * 16 + lane % 8 + (lane / 16) * 8) * kScorePitch + warp * 16 +
                                ((lane / 8) % 2) * 8);
#pragma unroll
      for (int c = 0; c < D / 16; ++c) {
        uint32_t kb[4];
        load_b_columns<kPitch<D>>(kb, k_tile, j * 16, c * 16, lane);
        mma_16816<T>(dq_part[2 * c], sa, kb[0], kb[1]);
        mma_16816<T>(dq_part[2 * c + 1], sa, kb[2], kb[3]);
      }
    }
    const float scale = p.scale_log2 / kLog2e;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int64_t row = q0 + warp * 16 + lane / 4 + r * 8;
      if (row >= p.q_len) continue;
      float* const dq_row = dq_sum + ((b * p.q_len + row) * p.heads + h) * p.head_dim;
#pragma unroll
      for (int n = 0; n < D / 8; ++n) {
        const int col = n * 8 + (lane % 4) * 2;
        if (col < p.head_dim) {
          atomicAdd(reinterpret_cast<float2*>(dq_row + col),
                    make_float2(dq_part[n][2 * r] * scale, dq_part[n][2 * r + 1] * scale));
        }
      }
    }
    __syncthreads();  // the stage and the dSᵀ tile are free for the next iteration
    stage ^= 1;
    qt = next;
  }

  const float scale = p.scale_log2 / kLog2e;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t key = k0 + warp * 16 + lane / 4 + r * 8;
    if (key >= p.k_len) continue;
    const int64_t at = ((b * p.k_len + key) * p.heads + h) * p.head_dim;
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      const int col = n * 8 + (lane % 4) * 2;
      if (col >= p.head_dim) continue;
      *reinterpret_cast<uint32_t*>(dk + at + col) = pack_pair<T>(dk_sum[n][2 * r] * scale, dk_sum[n][2 * r + 1] * scale);
      *reinterpret_cast<uint32_t*>(dv + at + col) = pack_pair<T>(dv_sum[n][2 * r], dv_sum[n][2 * r + 1]);
    }
  }
}

// ---------------------------------------------------------------------------------------------------
// Dispatch over dtype and padded head dim

int64_t padded_head_dim(int64_t head_dim) { return (head_dim + 15) / 16 * 16; }

template <typename Fn>
void dispatch_attention(KernelDtype dtype, int64_t head_dim, Fn&& fn) {
  auto with_dim = [&](auto tag) {
    using T = decltype(tag);
    switch (padded_head_dim(head_dim)) {
      case 16: fn.template operator()<T, 16>(); return;
      case 32: fn.template operator()<T, 32>(); return;
      case 48: fn.template operator()<T, 48>(); return;
      case 64: fn.template operator()<T, 64>(); return;
      case 80: fn.template operator()<T, 80>(); return;
      case 96: fn.template operator()<T, 96>(); return;
      case 112: fn.template operator()<T, 112>(); return;
      case 128: fn.template operator()<T, 128>(); return;
      default: throw std::invalid_argument("block-sparse attention: head dim " + std::to_string(head_dim));
    }
  };
  switch (dtype) {
    case KernelDtype::bf16: with_dim(__nv_bfloat16{}); return;
    case KernelDtype::fp16: with_dim(__half{}); return;
    case KernelDtype::fp32: break;
  }
  throw std::invalid_argument("block-sparse attention: float32 is not covered");
}

// Raises a kernel's dynamic shared-memory limit once (above 48 KiB needs the opt-in).
template <auto Kernel>
void allow_shared_bytes(int bytes) {
  static const cudaError_t set = cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (set != cudaSuccess) {
    throw std::runtime_error(std::string("block-sparse attention: shared memory opt-in: ") + cudaGetErrorString(set));
  }
}

unsigned grid_stride_blocks(int64_t threads_needed) {
  return static_cast<unsigned>(std::clamp<int64_t>((threads_needed + 255) / 256, 1, kernels::max_resident_blocks(256)));
}

}  // namespace

bool block_sparse_attention_head_dim_covered(int64_t head_dim) {
  return head_dim > 0 && head_dim % 8 == 0 && head_dim <= kAttentionMaxHeadDim;
}

void launch_attention_tile_map(const BlockSparseAttentionShape& shape, int64_t bias_batches, KernelDtype dtype,
                               const void* bias, uint8_t* map, void* cuda_stream) {
  const Operands p = operands_of(shape, bias_batches);
  const dim3 grid(static_cast<unsigned>(p.k_tiles), static_cast<unsigned>(p.q_tiles), static_cast<unsigned>(bias_batches));
  auto stream = static_cast<cudaStream_t>(cuda_stream);
  if (dtype == KernelDtype::bf16) {
    tile_map_kernel<<<grid, 256, 0, stream>>>(p, static_cast<const __nv_bfloat16*>(bias), map);
  } else if (dtype == KernelDtype::fp16) {
    tile_map_kernel<<<grid, 256, 0, stream>>>(p, static_cast<const __half*>(bias), map);
  } else {
    throw std::invalid_argument("block-sparse attention: float32 is not covered");
  }
  check_launch("attention tile map");
}

void launch_block_sparse_attention_forward(const BlockSparseAttentionShape& shape, KernelDtype dtype, const void* q,
                                           const void* k, const void* v, const void* bias, const uint8_t* map,
                                           int64_t bias_batches, void* out, float* log_sum_exp, void* cuda_stream) {
  const Operands p = operands_of(shape, bias_batches);
  const dim3 grid(static_cast<unsigned>(p.q_tiles), static_cast<unsigned>(p.heads), static_cast<unsigned>(p.batch));
  dispatch_attention(dtype, p.head_dim, [&]<typename T, int D>() {
    constexpr auto kernel = attention_forward<T, D>;
    allow_shared_bytes<kernel>(kForwardSharedBytes<D>);
    kernel<<<grid, kThreads, kForwardSharedBytes<D>, static_cast<cudaStream_t>(cuda_stream)>>>(
        p, static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v), static_cast<const T*>(bias), map,
        static_cast<T*>(out), log_sum_exp);
  });
  check_launch("block-sparse attention forward");
}

void launch_block_sparse_attention_backward(const BlockSparseAttentionShape& shape, KernelDtype dtype, const void* q,
                                            const void* k, const void* v, const void* bias, const uint8_t* map,
                                            int64_t bias_batches, const void* out, const void* grad_out,
                                            const float* log_sum_exp, const BlockSparseAttentionGrads& grads,
                                            void* cuda_stream) {
  const Operands p = operands_of(shape, bias_batches);
  auto stream = static_cast<cudaStream_t>(cuda_stream);
  const int64_t dq_count = p.batch * p.q_len * p.heads * p.head_dim;
  if (cudaMemsetAsync(grads.dq_sum, 0, dq_count * sizeof(float), stream) != cudaSuccess) {
    throw std::runtime_error("block-sparse attention backward: clearing the query-gradient sums failed");
  }
  const dim3 grid(static_cast<unsigned>(p.k_tiles), static_cast<unsigned>(p.heads), static_cast<unsigned>(p.batch));
  dispatch_attention(dtype, p.head_dim, [&]<typename T, int D>() {
    row_dot_kernel<T><<<grid_stride_blocks(p.batch * p.q_len * p.heads * 32), 256, 0, stream>>>(
        p, static_cast<const T*>(out), static_cast<const T*>(grad_out), grads.row_dot);
    check_launch("block-sparse attention row sums");
    constexpr auto kernel = attention_backward<T, D>;
    allow_shared_bytes<kernel>(kBackwardSharedBytes<D>);
    kernel<<<grid, kThreads, kBackwardSharedBytes<D>, stream>>>(
        p, static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v), static_cast<const T*>(bias), map,
        static_cast<const T*>(grad_out), log_sum_exp, grads.row_dot, grads.dq_sum, static_cast<T*>(grads.dk),
        static_cast<T*>(grads.dv));
    check_launch("block-sparse attention backward");
    round_dq_kernel<T><<<grid_stride_blocks(dq_count), 256, 0, stream>>>(dq_count, grads.dq_sum, static_cast<T*>(grads.dq));
    check_launch("block-sparse attention query gradients");
  });
}

}  // namespace zest
