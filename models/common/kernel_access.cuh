// Device helpers the model kernels share (nvcc only): float conversions of the activation dtypes and
// aligned packs of V consecutive elements (one vector load or store).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

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

}  // namespace zest::kernels
