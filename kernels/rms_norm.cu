// RMSNorm kernels (see rms_norm.h): a warp per row, lane l holding elements l, l+32, ... of the row: K
// slots a lane for rows of up to 32·K elements, the slots past the row's end holding nothing, so every
// head dim from 1 to 256 is covered by eight instantiations a dtype.
#include "kernels/kernel_access.cuh"
#include "kernels/rms_norm.h"

namespace zest {
namespace {

using namespace kernels;

constexpr int kWarps = 8;  // rows per block at a time
constexpr int kThreads = 32 * kWarps;

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__device__ __forceinline__ int64_t row_count(const RmsRows& r) { return r.batch * r.seq * r.heads; }

__device__ __forceinline__ int64_t row_offset(const RmsRows& r, int64_t row) {
  const int64_t h = row % r.heads, s = (row / r.heads) % r.seq, b = row / (r.heads * r.seq);
  return b * r.stride_b + s * r.stride_s + h * r.stride_h;
}

template <typename T, int K>
__global__ void forward_kernel(RmsRows r, const T* x, const T* weight, float eps, T* y, float* rstd) {
  const int lane = threadIdx.x % 32;
  const int64_t row = blockIdx.x * static_cast<int64_t>(kWarps) + threadIdx.x / 32;
  if (row >= row_count(r)) return;
  const T* in = x + row_offset(r, row);
  float v[K] = {}, sumsq = 0.0f;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    if (lane + 32 * k < r.head_dim) v[k] = to_float(in[lane + 32 * k]), sumsq += v[k] * v[k];
  }
  const float inv = rsqrtf(warp_sum(sumsq) / static_cast<float>(r.head_dim) + eps);
  if (lane == 0) rstd[row] = inv;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int j = lane + 32 * k;
    if (j < r.head_dim) y[row * r.head_dim + j] = from_float<T>(rounded<T>(v[k] * inv) * to_float(weight[j]));
  }
}

// dx = g·rstd − x·rstd³·Σ(g·x)/d with g = rounded(dy·weight); the weight's gradient Σ dy·rounded(x·rstd)
// over the rows, per block in `partial` [blocks, d].
template <typename T, int K>
__global__ void backward_kernel(RmsRows r, const T* dy, const T* x, const T* weight, const float* rstd, T* dx,
                                float* partial) {
  __shared__ float block_sum[kWarps][32 * K];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  float w[K] = {}, dweight[K] = {};
#pragma unroll
  for (int k = 0; k < K; ++k) {
    if (lane + 32 * k < r.head_dim) w[k] = to_float(weight[lane + 32 * k]);
  }
  for (int64_t row = blockIdx.x * static_cast<int64_t>(kWarps) + warp; row < row_count(r);
       row += static_cast<int64_t>(gridDim.x) * kWarps) {
    const T* in = x + row_offset(r, row);
    const float inv = rstd[row];
    float v[K] = {}, g[K] = {}, dot = 0.0f;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      if (lane + 32 * k >= r.head_dim) continue;
      const float d = to_float(dy[row * r.head_dim + lane + 32 * k]);
      v[k] = to_float(in[lane + 32 * k]);
      g[k] = rounded<T>(d * w[k]);
      dweight[k] += d * rounded<T>(v[k] * inv);
      dot += g[k] * v[k];
    }
    const float dmean = warp_sum(dot) * -0.5f * inv * inv * inv;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      if (lane + 32 * k >= r.head_dim) continue;
      dx[row * r.head_dim + lane + 32 * k] =
          from_float<T>(g[k] * inv + dmean * 2.0f * v[k] / static_cast<float>(r.head_dim));
    }
  }
#pragma unroll
  for (int k = 0; k < K; ++k) block_sum[warp][lane + 32 * k] = dweight[k];
  __syncthreads();
  for (int j = threadIdx.x; j < r.head_dim; j += kThreads) {
    float total = 0.0f;
    for (int k = 0; k < kWarps; ++k) total += block_sum[k][j];
    partial[blockIdx.x * r.head_dim + j] = total;
  }
}

// A block per weight element: its threads sum strided subsets of the blocks' partial sums, then a fixed
// tree adds those (one thread per element summing every block serially took ~58 µs a launch).
constexpr int kFinalizeThreads = 256;

__global__ void finalize_weight_kernel(const float* partial, int64_t blocks, int64_t d, float* dweight) {
  __shared__ float sums[kFinalizeThreads];
  const int64_t j = blockIdx.x;
  float total = 0.0f;
  for (int64_t b = threadIdx.x; b < blocks; b += kFinalizeThreads) total += partial[b * d + j];
  sums[threadIdx.x] = total;
  __syncthreads();
  for (int half = kFinalizeThreads / 2; half > 0; half >>= 1) {
    if (threadIdx.x < half) sums[threadIdx.x] += sums[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) dweight[j] = sums[0];
}

int64_t forward_blocks(const RmsRows& r) { return (r.rows() + kWarps - 1) / kWarps; }
// At most one wave of the backward kernel (kernel_access.cuh; fixed for a device, so the weight gradient's
// partial sums repeat bitwise).
int64_t backward_blocks(const RmsRows& r, int64_t wave) { return std::max<int64_t>(1, std::min(forward_blocks(r), wave)); }

constexpr int64_t kMaxHeadDim = 32 * 8;

// Calls fn.template operator()<T, K>() with K = ⌈head_dim / 32⌉ slots a lane.
template <typename Fn>
void dispatch_rows(KernelDtype dtype, int64_t head_dim, Fn&& fn) {
  if (head_dim < 1 || head_dim > kMaxHeadDim) {
    throw std::invalid_argument("RMSNorm kernels: head dim " + std::to_string(head_dim));
  }
  dispatch(dtype, 1, [&]<typename T, int>() {
    switch ((head_dim + 31) / 32) {
      case 1: fn.template operator()<T, 1>(); return;
      case 2: fn.template operator()<T, 2>(); return;
      case 3: fn.template operator()<T, 3>(); return;
      case 4: fn.template operator()<T, 4>(); return;
      case 5: fn.template operator()<T, 5>(); return;
      case 6: fn.template operator()<T, 6>(); return;
      case 7: fn.template operator()<T, 7>(); return;
      default: fn.template operator()<T, 8>(); return;
    }
  });
}

}  // namespace

bool rms_norm_covers(int64_t head_dim) { return head_dim >= 1 && head_dim <= kMaxHeadDim; }

int64_t rms_norm_backward_scratch(const RmsRows& rows) {
  return backward_blocks(rows, max_resident_blocks(kThreads)) * rows.head_dim;  // room for any kernel's wave
}

void launch_rms_norm_forward(const RmsRows& rows, KernelDtype dtype, const void* x, const void* weight, double eps,
                             void* y, float* rstd, void* cuda_stream) {
  const auto stream = static_cast<cudaStream_t>(cuda_stream);
  dispatch_rows(dtype, rows.head_dim, [&]<typename T, int K>() {
    forward_kernel<T, K><<<static_cast<unsigned>(forward_blocks(rows)), kThreads, 0, stream>>>(
        rows, static_cast<const T*>(x), static_cast<const T*>(weight), static_cast<float>(eps), static_cast<T*>(y),
        rstd);
  });
  check_launch("RMSNorm forward");
}

void launch_rms_norm_backward(const RmsRows& rows, KernelDtype dtype, const void* dy, const void* x,
                              const void* weight, const float* rstd, void* dx, float* dweight, float* scratch,
                              void* cuda_stream) {
  const auto stream = static_cast<cudaStream_t>(cuda_stream);
  dispatch_rows(dtype, rows.head_dim, [&]<typename T, int K>() {
    const int64_t blocks = backward_blocks(rows, one_wave_blocks<backward_kernel<T, K>>(kThreads));
    backward_kernel<T, K><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
        rows, static_cast<const T*>(dy), static_cast<const T*>(x), static_cast<const T*>(weight), rstd,
        static_cast<T*>(dx), scratch);
    finalize_weight_kernel<<<static_cast<unsigned>(rows.head_dim), kFinalizeThreads, 0, stream>>>(
        scratch, blocks, rows.head_dim, dweight);
  });
  check_launch("RMSNorm backward");
}

}  // namespace zest
