// q/k RMSNorm + RoPE kernels (see qk_norm_rope.h): a row (b, s, h) of d elements is a group of G lanes
// (a power of two, at most a warp), each holding V consecutive elements (one or two 16-byte accesses), so
// the RoPE pairs stay inside a lane; the row's sums are shuffles within its G lanes. When d / V is not a
// power of two the group is padded: its last lanes hold no elements and only join the shuffles. The head
// dim is a runtime value, so one instantiation per (dtype, V, G) serves every d of that group size.
#include "kernels/kernel_access.cuh"
#include "kernels/qk_norm_rope.h"

namespace zest {
namespace {

using namespace kernels;

constexpr int kThreads = 256;
constexpr int kMaxGroup = 32;                 // lanes of a row: the shuffles stay inside a warp
constexpr int64_t kMinHeadDim = 8, kMaxHeadDim = 256;

// Elements of one 16-byte access.
template <typename T>
inline constexpr int kAccessElements = 16 / static_cast<int>(sizeof(T));

// V elements at `at` in 16-byte accesses (V is one or two accesses).
template <typename T, int V>
__device__ __forceinline__ Pack<T, V> load_lane(const T* base, int64_t at) {
  constexpr int C = kAccessElements<T>;
  if constexpr (V <= C) {
    return load<T, V>(base, at);
  } else {
    Pack<T, V> out;
#pragma unroll
    for (int c = 0; c < V / C; ++c) {
      const auto part = load<T, C>(base, at + c * C);
#pragma unroll
      for (int i = 0; i < C; ++i) out.v[c * C + i] = part.v[i];
    }
    return out;
  }
}

template <typename T, int V>
__device__ __forceinline__ void store_lane(T* base, int64_t at, const Pack<T, V>& pack) {
  constexpr int C = kAccessElements<T>;
  if constexpr (V <= C) {
    store<T, V>(base, at, pack);
  } else {
#pragma unroll
    for (int c = 0; c < V / C; ++c) {
      Pack<T, C> part;
#pragma unroll
      for (int i = 0; i < C; ++i) part.v[i] = pack.v[c * C + i];
      store<T, C>(base, at + c * C, part);
    }
  }
}

template <int G>
__device__ __forceinline__ float row_sum(float v) {
#pragma unroll
  for (int offset = G / 2; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// QkvShape::seq() and rows() on the device.
__device__ __forceinline__ int64_t joint_seq(const QkvShape& s) {
  return s.stream[0].seq + (s.streams > 1 ? s.stream[1].seq : 0);
}
__device__ __forceinline__ int64_t joint_rows(const QkvShape& s) { return s.batch * joint_seq(s) * s.heads; }

// Where row (b, pos, h) of the joint sequence reads its projection.
struct RowSource {
  int stream;
  int64_t batch, local, head;  // local: the position within its stream
};

__device__ __forceinline__ RowSource source_of(const QkvShape& s, int64_t row) {
  const int64_t seq = joint_seq(s);
  const int64_t h = row % s.heads, pos = (row / s.heads) % seq, b = row / (s.heads * seq);
  const int stream = pos >= s.stream[0].seq ? 1 : 0;
  return {stream, b, pos - (stream ? s.stream[0].seq : 0), h};
}

__device__ __forceinline__ int64_t position_of(const QkvShape& s, int64_t row) { return (row / s.heads) % joint_seq(s); }

template <typename T>
__device__ __forceinline__ const T* proj_row(const QkvShape& s, const RowSource& r) {
  const QkvStream& st = s.stream[r.stream];
  return static_cast<const T*>(st.proj) + r.batch * st.stride_b + r.local * st.stride_s + r.head * s.head_dim;
}

template <typename T>
__device__ __forceinline__ T* dproj_row(const QkvShape& s, const RowSource& r) {
  const QkvStream& st = s.stream[r.stream];
  const int64_t width = 3 * s.heads * s.head_dim;
  return static_cast<T*>(st.dproj) + (r.batch * st.seq + r.local) * width + r.head * s.head_dim;
}

template <typename T>
__device__ __forceinline__ const T* weight_of(const QkvShape& s, int stream, int part) {
  return static_cast<const T*>(part == 0 ? s.stream[stream].q_weight : s.stream[stream].k_weight);
}

// Each group of G lanes takes one row per pass; every thread of a block runs the same passes (the
// shuffles need whole warps), rows past the end and padding lanes computing nothing.
template <typename T, int V, int G>
__global__ void forward_kernel(QkvShape s, const float* cos, const float* sin, float eps, T* q, T* k, T* v,
                               float* rstd_q, float* rstd_k) {
  const int64_t D = s.head_dim;
  const int lane = threadIdx.x % G;
  const int64_t row = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / G;
  const bool valid = row < joint_rows(s);
  const bool holds = lane * V < D;  // a padding lane holds no elements
  const int64_t r = valid ? row : 0;
  const RowSource src = source_of(s, r);
  const int64_t pos = position_of(s, r);
  const int64_t at = holds ? lane * V : 0;
  const T* in = proj_row<T>(s, src) + at;
  const int64_t width = s.heads * D;  // one of q | k | v
  const int64_t out_at = r * D + at;
#pragma unroll
  for (int part = 0; part < 2; ++part) {
    float y[V], sumsq = 0.0f;
    if (holds) {
      const auto x = load_lane<T, V>(in, part * width);
#pragma unroll
      for (int j = 0; j < V; ++j) y[j] = to_float(x.v[j]), sumsq += y[j] * y[j];
    }
    const float inv = rsqrtf(row_sum<G>(sumsq) / static_cast<float>(D) + eps);
    if (!holds) continue;
    const auto w = load_lane<T, V>(weight_of<T>(s, src.stream, part), at);
#pragma unroll
    for (int j = 0; j < V; ++j) y[j] = rounded<T>(rounded<T>(y[j] * inv) * to_float(w.v[j]));
    Pack<T, V> out;
    if (pos < s.rotated) {
      const float* c = cos + pos * D + at;
      const float* n = sin + pos * D + at;
#pragma unroll
      for (int p = 0; p < V; p += 2) {  // (y0, y1) → (y0·c0 − y1·s0, y1·c1 + y0·s1), each op rounded
        out.v[p] = from_float<T>(__fadd_rn(__fmul_rn(y[p], c[p]), __fmul_rn(-y[p + 1], n[p])));
        out.v[p + 1] = from_float<T>(__fadd_rn(__fmul_rn(y[p + 1], c[p + 1]), __fmul_rn(y[p], n[p + 1])));
      }
    } else {
#pragma unroll
      for (int j = 0; j < V; ++j) out.v[j] = from_float<T>(y[j]);
    }
    if (valid) {
      store_lane<T, V>(part == 0 ? q : k, out_at, out);
      if (lane == 0) (part == 0 ? rstd_q : rstd_k)[row] = inv;
    }
  }
  if (valid && holds && v != nullptr) store_lane<T, V>(v, out_at, load_lane<T, V>(in, 2 * width));
}

// Per row and part: RoPE's transpose, then RMSNorm's backward (dx = g·rstd − x·rstd³·Σ(g·x)/d with
// g = rounded(dy·weight)); the weights' gradients Σ dy·rounded(x·rstd) per lane, then per block in
// `partial` [blocks, streams·2·d] (the block's table is sized for the group's widest d, G·V).
template <typename T, int V, int G>
__global__ void backward_kernel(QkvShape s, const float* cos, const float* sin, const T* dq, const T* dk, const T* dv,
                                const float* rstd_q, const float* rstd_k, float* partial) {
  constexpr int kRowsPerPass = kThreads / G;
  __shared__ float block_sum[kRowsPerPass][2 * 2 * G * V];
  const int64_t D = s.head_dim;
  const int lane = threadIdx.x % G;
  const int group = threadIdx.x / G;
  const bool holds = lane * V < D;
  const int64_t at = holds ? lane * V : 0;
  const int64_t rows = joint_rows(s), width = s.heads * D;
  float dweight0[2][V] = {}, dweight1[2][V] = {};  // streams 0 and 1 (registers: indices fixed at compile time)
  for (int64_t first = blockIdx.x * static_cast<int64_t>(kRowsPerPass); first < rows;
       first += static_cast<int64_t>(gridDim.x) * kRowsPerPass) {
    const int64_t row = first + group;
    const bool valid = row < rows;
    const int64_t r = valid ? row : 0;
    const RowSource src = source_of(s, r);
    const int64_t pos = position_of(s, r);
    const T* in = proj_row<T>(s, src) + at;
    T* out = dproj_row<T>(s, src) + at;
#pragma unroll
    for (int part = 0; part < 2; ++part) {
      float dy[V] = {}, x[V] = {}, gw[V] = {}, dot = 0.0f;
      const float inv = (part == 0 ? rstd_q : rstd_k)[r];
      if (holds) {
        const auto g = load_lane<T, V>(part == 0 ? dq : dk, r * D + at);
        if (pos < s.rotated) {
          const float* c = cos + pos * D + at;
          const float* n = sin + pos * D + at;
#pragma unroll
          for (int p = 0; p < V; p += 2) {  // (g0, g1) → (g0·c0 + g1·s1, g1·c1 − g0·s0)
            const float g0 = to_float(g.v[p]), g1 = to_float(g.v[p + 1]);
            dy[p] = rounded<T>(__fadd_rn(__fmul_rn(g0, c[p]), __fmul_rn(g1, n[p + 1])));
            dy[p + 1] = rounded<T>(__fadd_rn(__fmul_rn(g1, c[p + 1]), -__fmul_rn(g0, n[p])));
          }
        } else {
#pragma unroll
          for (int j = 0; j < V; ++j) dy[j] = to_float(g.v[j]);
        }
        const auto xp = load_lane<T, V>(in, part * width);
        const auto w = load_lane<T, V>(weight_of<T>(s, src.stream, part), at);
#pragma unroll
        for (int j = 0; j < V; ++j) {
          x[j] = to_float(xp.v[j]);
          gw[j] = rounded<T>(dy[j] * to_float(w.v[j]));
          const float contribution = valid ? dy[j] * rounded<T>(x[j] * inv) : 0.0f;
          dweight0[part][j] += src.stream == 0 ? contribution : 0.0f;
          dweight1[part][j] += src.stream == 1 ? contribution : 0.0f;
          dot += gw[j] * x[j];
        }
      }
      const float dmean = row_sum<G>(dot) * -0.5f * inv * inv * inv;
      if (!holds) continue;
      Pack<T, V> dx;
#pragma unroll
      for (int j = 0; j < V; ++j) dx.v[j] = from_float<T>(gw[j] * inv + dmean * 2.0f * x[j] / static_cast<float>(D));
      if (valid) store_lane<T, V>(out, part * width, dx);
    }
    if (valid && holds) store_lane<T, V>(out, 2 * width, load_lane<T, V>(dv, r * D + at));
  }
  if (holds) {
#pragma unroll
    for (int part = 0; part < 2; ++part) {
#pragma unroll
      for (int j = 0; j < V; ++j) {
        block_sum[group][part * D + at + j] = dweight0[part][j];
        block_sum[group][(2 + part) * D + at + j] = dweight1[part][j];
      }
    }
  }
  __syncthreads();
  for (int64_t i = threadIdx.x; i < 2 * 2 * D; i += kThreads) {
    float total = 0.0f;
    for (int g = 0; g < kRowsPerPass; ++g) total += block_sum[g][i];
    partial[blockIdx.x * (2 * 2 * D) + i] = total;
  }
}

// How a row of d elements is spread: V elements a lane, G lanes a row (V = 0: not covered).
struct RowLanes {
  int elements = 0, group = 0;
};

RowLanes row_lanes(int64_t head_dim, int element_bytes) {
  if (element_bytes != 2 && element_bytes != 4) return {};
  if (head_dim < kMinHeadDim || head_dim > kMaxHeadDim) return {};
  const int access = 16 / element_bytes;
  for (const int elements : {access, 2 * access}) {  // the second only where one access a lane needs > 32 lanes
    if (head_dim % elements != 0) continue;
    const int64_t lanes = head_dim / elements;
    if (lanes > kMaxGroup) continue;
    int group = 1;
    while (group < lanes) group *= 2;
    return {elements, group};
  }
  return {};
}

int64_t forward_blocks(const QkvShape& s, int group) {
  return (s.rows() * group + kThreads - 1) / kThreads;
}

// The backward's blocks: one per kThreads / group rows, at most one wave of the kernel (`wave`, from
// one_wave_blocks; fixed for a device, so the weight gradients' partial sums repeat bitwise).
int64_t backward_blocks(const QkvShape& s, int group, int64_t wave) {
  const int64_t rows_per_pass = kThreads / group;
  return std::max<int64_t>(1, std::min((s.rows() + rows_per_pass - 1) / rows_per_pass, wave));
}

// Calls fn.template operator()<T, V, G>() for the head dim's lanes; the element counts are 16 bytes for
// every dtype, and 32 bytes for float32 rows wider than 32 lanes of four.
template <typename Fn>
void dispatch_lanes(KernelDtype dtype, int64_t head_dim, Fn&& fn) {
  const int element_bytes = dtype == KernelDtype::fp32 ? 4 : 2;
  const RowLanes lanes = row_lanes(head_dim, element_bytes);
  if (lanes.elements == 0) throw std::invalid_argument("q/k norm + RoPE kernels: head dim " + std::to_string(head_dim));
  dispatch(dtype, 1, [&]<typename T, int>() {
    constexpr int C = kAccessElements<T>;
    const auto with_group = [&]<int V>() {
      switch (lanes.group) {
        case 1: fn.template operator()<T, V, 1>(); return;
        case 2: fn.template operator()<T, V, 2>(); return;
        case 4: fn.template operator()<T, V, 4>(); return;
        case 8: fn.template operator()<T, V, 8>(); return;
        case 16: fn.template operator()<T, V, 16>(); return;
        case 32: fn.template operator()<T, V, 32>(); return;
        default: throw std::invalid_argument("q/k norm + RoPE kernels: lane group " + std::to_string(lanes.group));
      }
    };
    if (lanes.elements == C) {
      with_group.template operator()<C>();
    } else if constexpr (sizeof(T) == 4) {  // two accesses a lane: float32 rows of more than 128 elements
      if (lanes.group != kMaxGroup) throw std::invalid_argument("q/k norm + RoPE kernels: lane layout");
      fn.template operator()<T, 2 * C, kMaxGroup>();
    } else {
      throw std::invalid_argument("q/k norm + RoPE kernels: lane layout");
    }
  });
}

}  // namespace

bool qk_norm_rope_covers(int64_t head_dim, int element_bytes) {
  return row_lanes(head_dim, element_bytes).elements > 0;
}

int64_t qk_norm_rope_alignment(int element_bytes) { return 16 / element_bytes; }

int64_t qk_norm_rope_scratch(const QkvShape& shape, int element_bytes) {
  // Room for the largest wave any kernel of kThreads can have; the launch uses at most its own.
  return backward_blocks(shape, row_lanes(shape.head_dim, element_bytes).group, max_resident_blocks(kThreads)) * 2 * 2 *
         shape.head_dim;
}

void launch_qk_norm_rope_forward(const QkvShape& shape, KernelDtype dtype, const float* cos, const float* sin,
                                 double eps, void* q, void* k, void* v, float* rstd_q, float* rstd_k,
                                 void* cuda_stream) {
  const auto stream = static_cast<cudaStream_t>(cuda_stream);
  dispatch_lanes(dtype, shape.head_dim, [&]<typename T, int V, int G>() {
    forward_kernel<T, V, G><<<static_cast<unsigned>(forward_blocks(shape, G)), kThreads, 0, stream>>>(
        shape, cos, sin, static_cast<float>(eps), static_cast<T*>(q), static_cast<T*>(k), static_cast<T*>(v), rstd_q,
        rstd_k);
  });
  check_launch("q/k norm + RoPE forward");
}

void launch_qk_norm_rope_backward(const QkvShape& shape, KernelDtype dtype, const float* cos, const float* sin,
                                  const void* dq, const void* dk, const void* dv, const float* rstd_q,
                                  const float* rstd_k, float* dweights, float* scratch, void* cuda_stream) {
  const auto stream = static_cast<cudaStream_t>(cuda_stream);
  dispatch_lanes(dtype, shape.head_dim, [&]<typename T, int V, int G>() {
    const int64_t blocks = backward_blocks(shape, G, one_wave_blocks<backward_kernel<T, V, G>>(kThreads));
    backward_kernel<T, V, G><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
        shape, cos, sin, static_cast<const T*>(dq), static_cast<const T*>(dk), static_cast<const T*>(dv), rstd_q,
        rstd_k, scratch);
    // Stream 1's sums are zero with one stream; only the streams asked for are written.
    launch_sum_tile_partials(scratch, 1, blocks, 2 * 2 * shape.head_dim, dweights, stream);
  });
  check_launch("q/k norm + RoPE backward");
}

}  // namespace zest
