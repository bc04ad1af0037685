// Convolution weight layout kernels (see conv_weight_layout.h). A block owns one output channel o and a tile
// of kTile input channels [i0, i0 + n): it reads the tile's n·taps elements where they are contiguous, holds
// them in shared memory as [n, taps], and writes them where the other layout has them contiguous — taps runs
// of n elements in channels-last, one run of n·taps elements in the parameter's layout.
#include "kernels/conv_weight_layout.h"
#include "kernels/kernel_access.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace zest {
namespace {

using namespace kernels;

constexpr int kThreads = 256;
constexpr int64_t kTile = 256;
constexpr int64_t kMaxTaps = 16;

// The tile [i0, i0 + n) of block (o, tile) and the offsets of channel o in either layout (both out·in·taps).
struct Tile {
  int64_t o, i0, n, base;
  __device__ Tile(const ConvWeightShape& s)
      : o(blockIdx.x), i0(static_cast<int64_t>(blockIdx.y) * kTile), n(min(kTile, s.in - i0)), base(o * s.in * s.taps) {}
};

template <typename T>
__global__ void to_channels_last_kernel(ConvWeightShape s, const T* weight, T* channels_last) {
  __shared__ T tile[kTile * kMaxTaps];
  const Tile t(s);
  const int64_t count = t.n * s.taps;
  // [i, tap] for the tile's channels: one contiguous run of the parameter's layout.
  for (int64_t j = threadIdx.x; j < count; j += kThreads) tile[j] = weight[t.base + t.i0 * s.taps + j];
  __syncthreads();
  // channels-last [tap, i]: runs of n along i.
  for (int64_t j = threadIdx.x; j < count; j += kThreads) {
    const int64_t tap = j / t.n, i = j % t.n;
    channels_last[t.base + tap * s.in + t.i0 + i] = tile[i * s.taps + tap];
  }
}

template <typename G, typename S>
__global__ void grad_accumulate_kernel(ConvWeightShape s, const G* grad, S* slot) {
  __shared__ float tile[kTile * kMaxTaps];
  const Tile t(s);
  const int64_t count = t.n * s.taps;
  for (int64_t j = threadIdx.x; j < count; j += kThreads) {
    const int64_t tap = j / t.n, i = j % t.n;
    tile[i * s.taps + tap] = to_float(grad[t.base + tap * s.in + t.i0 + i]);
  }
  __syncthreads();
  for (int64_t j = threadIdx.x; j < count; j += kThreads) {
    S& target = slot[t.base + t.i0 * s.taps + j];
    target = from_float<S>(to_float(target) + tile[j]);
  }
}

dim3 grid_of(const ConvWeightShape& s) {
  return dim3(static_cast<unsigned>(s.out), static_cast<unsigned>((s.in + kTile - 1) / kTile));
}

template <typename Fn>
void with_16bit(KernelDtype dtype, Fn&& fn) {
  switch (dtype) {
    case KernelDtype::bf16: fn(__nv_bfloat16{}); return;
    case KernelDtype::fp16: fn(__half{}); return;
    case KernelDtype::fp32: fn(float{}); return;
  }
}

}  // namespace

bool conv_weight_layout_supports(const ConvWeightShape& shape) {
  return shape.out > 0 && shape.out <= 65535 * 1024 && shape.in > 0 && (shape.in + kTile - 1) / kTile <= 65535 &&
         shape.taps > 0 && shape.taps <= kMaxTaps;
}

void launch_conv_weight_to_channels_last(const ConvWeightShape& shape, KernelDtype dtype, const void* weight,
                                         void* channels_last, void* cuda_stream) {
  const auto stream = static_cast<cudaStream_t>(cuda_stream);
  with_16bit(dtype, [&](auto tag) {
    using T = decltype(tag);
    to_channels_last_kernel<T><<<grid_of(shape), kThreads, 0, stream>>>(shape, static_cast<const T*>(weight),
                                                                        static_cast<T*>(channels_last));
  });
  check_launch("conv weight to channels-last");
}

void launch_conv_weight_grad_accumulate(const ConvWeightShape& shape, KernelDtype grad_dtype, const void* grad,
                                        KernelDtype slot_dtype, void* slot, void* cuda_stream) {
  const auto stream = static_cast<cudaStream_t>(cuda_stream);
  with_16bit(grad_dtype, [&](auto grad_tag) {
    using G = decltype(grad_tag);
    if (slot_dtype == KernelDtype::fp32) {
      grad_accumulate_kernel<G, float><<<grid_of(shape), kThreads, 0, stream>>>(shape, static_cast<const G*>(grad),
                                                                                static_cast<float*>(slot));
    } else {
      grad_accumulate_kernel<G, G><<<grid_of(shape), kThreads, 0, stream>>>(shape, static_cast<const G*>(grad),
                                                                            static_cast<G*>(slot));
    }
  });
  check_launch("conv weight gradient accumulation");
}

}  // namespace zest
