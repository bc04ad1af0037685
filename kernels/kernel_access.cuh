// What the model kernels share (nvcc only): float conversions of the activation dtypes, aligned packs of V
// consecutive elements (one vector load or store), the dispatch over dtype and vector width, the
// fixed-order sum of backward's per-tile column sums, one-wave grids for grid-stride kernels, and the launch
// check.
#pragma once

#include "kernels/kernel_dtype.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>

namespace zest::kernels {

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }

template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) { return v; }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <>
__device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }

// The dtype's own rounding of a float result (what an op-by-op computation stores between ops).
template <typename T>
__device__ __forceinline__ float rounded(float v) { return to_float(from_float<T>(v)); }

template <typename T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};
template <typename T, int V>
__device__ __forceinline__ Pack<T, V> load(const T* base, int64_t at) {
  return *reinterpret_cast<const Pack<T, V>*>(base + at);
}
template <typename T, int V>
__device__ __forceinline__ void store(T* base, int64_t at, const Pack<T, V>& pack) {
  *reinterpret_cast<Pack<T, V>*>(base + at) = pack;
}

// Calls fn.template operator()<T, V>() for the runtime dtype and vector width (1, 2, 4 or 8).
template <typename Fn>
void dispatch(KernelDtype dtype, int vector_width, Fn&& fn) {
  auto with_width = [&](auto tag) {
    using T = decltype(tag);
    switch (vector_width) {
      case 1: fn.template operator()<T, 1>(); return;
      case 2: fn.template operator()<T, 2>(); return;
      case 4: fn.template operator()<T, 4>(); return;
      case 8: fn.template operator()<T, 8>(); return;
      default: throw std::invalid_argument("kernel vector width " + std::to_string(vector_width));
    }
  };
  switch (dtype) {
    case KernelDtype::fp32: with_width(float{}); return;
    case KernelDtype::bf16: with_width(__nv_bfloat16{}); return;
    case KernelDtype::fp16: with_width(__half{}); return;
  }
}

// The widest access among 8, 4, 2, 1 elements down to `narrowest` (at most 16 bytes) that divides
// `extent` and to which every pointer is aligned; 0 when none does.
inline int widest_vector_width(int64_t extent, int element_bytes, const void* const* pointers, int num_pointers,
                               int narrowest) {
  for (const int width : {8, 4, 2, 1}) {
    const int bytes = width * element_bytes;
    if (width < narrowest) break;
    if (bytes > 16 || extent % width != 0) continue;
    bool aligned = true;
    for (int p = 0; p < num_pointers; ++p) {
      aligned = aligned && reinterpret_cast<std::uintptr_t>(pointers[p]) % static_cast<std::uintptr_t>(bytes) == 0;
    }
    if (aligned) return width;
  }
  return 0;
}

// out[g·dim + j] = Σ_t partial[(g·tiles + t)·dim + j]: a backward pass's per-tile column sums (a tile: a
// block's share of one group's rows) added in a fixed order, so the totals repeat bitwise. A block takes
// 32 neighbouring columns of one group (each warp reads 128 contiguous bytes) and deals the tiles to 16
// slices of threads, slice s adding tiles s, s + 16, ... in turn; the slices' sums are then added in slice
// order. (One thread per column adding every tile ran 20-25 µs a call, latency-bound: 3.2 ms of a
// HY-Motion 1B step in 140 calls.) A template, so that every kernel file may instantiate it.
constexpr int kTileSumColumns = 32;
constexpr int kTileSumSlices = 16;

template <typename Accum>
__global__ void sum_tile_partials(const Accum* partial, int64_t tiles, int64_t dim, Accum* out) {
  __shared__ Accum slice_sum[kTileSumSlices][kTileSumColumns];
  const int64_t g = blockIdx.y;
  const int64_t j = blockIdx.x * static_cast<int64_t>(kTileSumColumns) + threadIdx.x;
  Accum total = 0;
  if (j < dim) {
    for (int64_t t = threadIdx.y; t < tiles; t += kTileSumSlices) total += partial[(g * tiles + t) * dim + j];
  }
  slice_sum[threadIdx.y][threadIdx.x] = total;
  __syncthreads();
  if (threadIdx.y != 0 || j >= dim) return;
  Accum sum = 0;
  for (int s = 0; s < kTileSumSlices; ++s) sum += slice_sum[s][threadIdx.x];
  out[g * dim + j] = sum;
}

inline void launch_sum_tile_partials(const float* partial, int64_t groups, int64_t tiles, int64_t dim, float* out,
                                     cudaStream_t stream) {
  const dim3 threads(kTileSumColumns, kTileSumSlices);
  const dim3 blocks(static_cast<unsigned>((dim + kTileSumColumns - 1) / kTileSumColumns), static_cast<unsigned>(groups));
  sum_tile_partials<float><<<blocks, threads, 0, stream>>>(partial, tiles, dim, out);
}

// The streaming multiprocessors of the current device (one per process: a rank drives one GPU).
inline int64_t device_sm_count() {
  static const int64_t sms = [] {
    int device = 0, count = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
      return int64_t{1};
    }
    return static_cast<int64_t>(count);
  }();
  return sms;
}

// The most blocks of `threads` threads any kernel can keep resident on the device (threads per SM / threads):
// what scratch sized per block must hold for one_wave_blocks below.
inline int64_t max_resident_blocks(int threads) { return device_sm_count() * (2048 / threads); }

// The blocks of Kernel (launched with `threads` threads, no dynamic shared memory) that the device runs at
// once. A grid-stride kernel gets this many blocks at most: one more than a whole wave runs a second, partial
// wave while most SMs wait — 1024 blocks of the q/k backward at 7 resident a block per SM on an H200's 132
// made it ~2x slower than the bytes it moves.
template <auto Kernel>
int64_t one_wave_blocks(int threads) {
  // Found once for each block size the kernel is launched with (a kernel sized to its rows takes several).
  static std::mutex mutex;
  static std::map<int, int64_t> blocks_by_threads;
  const std::lock_guard<std::mutex> lock(mutex);
  const auto found = blocks_by_threads.find(threads);
  if (found != blocks_by_threads.end()) return found->second;
  int per_sm = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, Kernel, threads, 0) != cudaSuccess || per_sm < 1) {
    per_sm = 1;
  }
  const int64_t blocks = std::min(device_sm_count() * per_sm, max_resident_blocks(threads));
  blocks_by_threads.emplace(threads, blocks);
  return blocks;
}

inline void check_launch(const char* what) {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) throw std::runtime_error(std::string(what) + " launch failed: " + cudaGetErrorString(err));
}

}  // namespace zest::kernels
