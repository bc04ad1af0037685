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

// One row's backward inputs (both parts' output gradients and projection values, and v's gradient), loaded
// as a whole before any of them is used, so that a thread has five 16-byte loads in flight.
template <typename T, int V>
struct BackwardRow {
  Pack<T, V> dy[2], x[2], dv;
};

template <typename T, int V>
__device__ __forceinline__ BackwardRow<T, V> load_backward_row(const QkvShape& s, const RowSource& src, int64_t row,
                                                              int64_t at, const T* dq, const T* dk, const T* dv) {
  const int64_t D = s.head_dim, width = s.heads * D;
  const T* proj = proj_row<T>(s, src) + at;
  BackwardRow<T, V> in;
  in.dy[0] = load_lane<T, V>(dq, row * D + at);
  in.dy[1] = load_lane<T, V>(dk, row * D + at);
  in.dv = load_lane<T, V>(dv, row * D + at);
  in.x[0] = load_lane<T, V>(proj, 0);
  in.x[1] = load_lane<T, V>(proj, width);
  return in;
}

// Both parts' row sums at once (two independent shuffle chains).
template <int G>
__device__ __forceinline__ float2 row_sum2(float2 v) {
#pragma unroll
  for (int offset = G / 2; offset > 0; offset >>= 1) {
    v.x += __shfl_xor_sync(0xffffffffu, v.x, offset);
    v.y += __shfl_xor_sync(0xffffffffu, v.y, offset);
  }
  return v;
}

// Per row and part: RoPE's transpose, then RMSNorm's backward (dx = g·rstd − x·rstd³·Σ(g·x)/d with
// g = rounded(dy·weight)); the weights' gradients Σ dy·rounded(x·rstd). The rows are taken stream by stream,
// so a thread sums one stream's weight gradients at a time in registers; at the end of a stream the groups
// of each warp (which hold the same columns) are summed by shuffles, then the block's warps in
// `block_sum`, into `partial` [blocks, 2 streams·2·d] (zeros for a stream not there). Every order of
// addition is fixed. At least three blocks a multiprocessor (at most 85 registers a thread): the kernel is
// bound by memory, and the warps in flight are what hide its latency.
template <typename T, int V, int G>
__global__ void __launch_bounds__(kThreads, 3)
    backward_kernel(QkvShape s, const float* cos, const float* sin, const T* dq, const T* dk, const T* dv,
                    const float* rstd_q, const float* rstd_k, float* partial) {
  constexpr int kRowsPerPass = kThreads / G;
  constexpr int kWarps = kThreads / 32;
  __shared__ float block_sum[kWarps][2 * G * V];
  const int64_t D = s.head_dim;
  const int lane = threadIdx.x % G;
  const int group = threadIdx.x / G;
  const bool holds = lane * V < D;
  const int64_t at = holds ? lane * V : 0;
  const int64_t seq = joint_seq(s), width = s.heads * D;
  for (int st = 0; st < 2; ++st) {
    float dweight[2][V] = {};
    const int64_t stream_seq = st < s.streams ? s.stream[st].seq : 0;
    const int64_t offset = st == 0 ? 0 : s.stream[0].seq;  // the stream's first position in the joint sequence
    const int64_t stream_rows = s.batch * stream_seq * s.heads;
    for (int64_t first = blockIdx.x * static_cast<int64_t>(kRowsPerPass); first < stream_rows;
         first += static_cast<int64_t>(gridDim.x) * kRowsPerPass) {
      const int64_t i = first + group;
      const bool valid = i < stream_rows;
      const int64_t local_row = valid ? i : 0;
      const int64_t h = local_row % s.heads, local = (local_row / s.heads) % stream_seq;
      const int64_t b = local_row / (s.heads * stream_seq);
      const int64_t pos = offset + local;
      const int64_t row = (b * seq + pos) * s.heads + h;
      const RowSource src{st, b, local, h};
      BackwardRow<T, V> in = {};
      if (holds) in = load_backward_row<T, V>(s, src, row, at, dq, dk, dv);
      const float inv[2] = {rstd_q[row], rstd_k[row]};
      Pack<T, V> gw[2];  // rounded(dy·weight), kept in the activation dtype it is rounded to
      float2 dot = make_float2(0.0f, 0.0f);
      if (holds) {
#pragma unroll
        for (int part = 0; part < 2; ++part) {
          float dy[V];
          if (pos < s.rotated) {
            const float* c = cos + pos * D + at;
            const float* n = sin + pos * D + at;
#pragma unroll
            for (int p = 0; p < V; p += 2) {  // (g0, g1) → (g0·c0 + g1·s1, g1·c1 − g0·s0)
              const float g0 = to_float(in.dy[part].v[p]), g1 = to_float(in.dy[part].v[p + 1]);
              dy[p] = rounded<T>(__fadd_rn(__fmul_rn(g0, c[p]), __fmul_rn(g1, n[p + 1])));
              dy[p + 1] = rounded<T>(__fadd_rn(__fmul_rn(g1, c[p + 1]), -__fmul_rn(g0, n[p])));
            }
          } else {
#pragma unroll
            for (int j = 0; j < V; ++j) dy[j] = to_float(in.dy[part].v[j]);
          }
          const auto w = load_lane<T, V>(weight_of<T>(s, st, part), at);
          float part_dot = 0.0f;
#pragma unroll
          for (int j = 0; j < V; ++j) {
            const float x = to_float(in.x[part].v[j]);
            gw[part].v[j] = from_float<T>(dy[j] * to_float(w.v[j]));
            dweight[part][j] += valid ? dy[j] * rounded<T>(x * inv[part]) : 0.0f;
            part_dot += to_float(gw[part].v[j]) * x;
          }
          (part == 0 ? dot.x : dot.y) = part_dot;
        }
      }
      const float2 sums = row_sum2<G>(dot);
      if (valid && holds) {
        T* out = dproj_row<T>(s, src) + at;
#pragma unroll
        for (int part = 0; part < 2; ++part) {
          const float dmean = (part == 0 ? sums.x : sums.y) * -0.5f * inv[part] * inv[part] * inv[part];
          Pack<T, V> dx;
#pragma unroll
          for (int j = 0; j < V; ++j) {
            dx.v[j] = from_float<T>(to_float(gw[part].v[j]) * inv[part] +
                                    dmean * 2.0f * to_float(in.x[part].v[j]) / static_cast<float>(D));
          }
          store_lane<T, V>(out, part * width, dx);
        }
        store_lane<T, V>(out, 2 * width, in.dv);
      }
    }
    // The stream's weight gradients: the groups of a warp by shuffles, then the warps in shared memory.
#pragma unroll
    for (int part = 0; part < 2; ++part) {
#pragma unroll
      for (int j = 0; j < V; ++j) {
#pragma unroll
        for (int offset_lanes = G; offset_lanes < 32; offset_lanes <<= 1) {
          dweight[part][j] += __shfl_xor_sync(0xffffffffu, dweight[part][j], offset_lanes);
        }
      }
    }
    const int warp = threadIdx.x / 32;
    if (holds && threadIdx.x % 32 < G) {
#pragma unroll
      for (int part = 0; part < 2; ++part) {
#pragma unroll
        for (int j = 0; j < V; ++j) block_sum[warp][part * D + at + j] = dweight[part][j];
      }
    }
    __syncthreads();
    for (int64_t c = threadIdx.x; c < 2 * D; c += kThreads) {
      float total = 0.0f;
      for (int w = 0; w < kWarps; ++w) total += block_sum[w][c];
      partial[blockIdx.x * (2 * 2 * D) + st * 2 * D + c] = total;
    }
    __syncthreads();  // the table is the next stream's
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
