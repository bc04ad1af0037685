// The fp8 cast kernels (see fp8_cast.h). Both the absolute maximum and the cast read the matrix in packs of
// up to 16 bytes where its rows allow; the transposed cast goes through a 32×32 tile in shared memory so that
// both its reads and its writes are contiguous.
#include "kernels/fp8_cast.h"
#include "kernels/kernel_access.cuh"

#include <cuda_fp8.h>

namespace zest {
namespace {

using namespace kernels;

constexpr int kThreads = 256;

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// The block's maximum of non-negative values (or NaN) into *amax. Non-negative floats order as their bit
// patterns do, so an integer atomicMax keeps the largest; a NaN's pattern (0x7fc00000) is above infinity's.
__device__ void block_max_into(float m, bool saw_nan, float* amax) {
  __shared__ float warp_maxima[kThreads / 32];
  __shared__ int any_nan;
  if (threadIdx.x == 0) any_nan = 0;
  __syncthreads();
  if (saw_nan) any_nan = 1;
  m = warp_max(m);
  if (threadIdx.x % 32 == 0) warp_maxima[threadIdx.x / 32] = m;
  __syncthreads();
  if (threadIdx.x != 0) return;
  for (int w = 1; w < kThreads / 32; ++w) m = fmaxf(m, warp_maxima[w]);
  if (any_nan) m = __int_as_float(0x7fc00000);
  atomicMax(reinterpret_cast<int*>(amax), __float_as_int(m));
}

template <typename T, int V>
__global__ void amax_kernel(const T* x, int64_t rows, int64_t cols, int64_t row_stride, float* amax) {
  const int64_t packs_per_row = cols / V;
  const int64_t packs = rows * packs_per_row;
  float m = 0.0f;
  bool saw_nan = false;
  for (int64_t p = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; p < packs;
       p += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = p / packs_per_row;
    const auto pack = load<T, V>(x, r * row_stride + (p - r * packs_per_row) * V);
#pragma unroll
    for (int v = 0; v < V; ++v) {
      const float a = fabsf(to_float(pack.v[v]));
      saw_nan |= a != a;
      m = fmaxf(m, a);
    }
  }
  block_max_into(m, saw_nan, amax);
}

// fp8_largest / amax; 1 for an all-zero matrix (its values stay zero).
__device__ __forceinline__ float scale_of(float amax, float largest) { return amax == 0.0f ? 1.0f : largest / amax; }

template <typename F8>
__device__ __forceinline__ uint8_t to_fp8(float v) {
  return F8(v).__x;  // the constructor rounds to nearest and saturates to the largest finite value
}

template <typename T, int V, typename F8>
__global__ void cast_kernel(const T* x, int64_t rows, int64_t cols, int64_t row_stride, const float* amax,
                            float largest, uint8_t* out, float* scale_inv) {
  const float scale = scale_of(*amax, largest);
  if (blockIdx.x == 0 && threadIdx.x == 0) *scale_inv = 1.0f / scale;
  const int64_t packs_per_row = cols / V;
  const int64_t packs = rows * packs_per_row;
  for (int64_t p = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; p < packs;
       p += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = p / packs_per_row, c = (p - r * packs_per_row) * V;
    const auto pack = load<T, V>(x, r * row_stride + c);
    Pack<uint8_t, V> bytes;
#pragma unroll
    for (int v = 0; v < V; ++v) bytes.v[v] = to_fp8<F8>(to_float(pack.v[v]) * scale);
    store<uint8_t, V>(out, r * cols + c, bytes);
  }
}

constexpr int kTile = 32;
constexpr int kTileRowsPerPass = 8;

// out [cols, rows] = fp8(xᵀ · scale): a block moves one 32×32 tile, reading rows of x and writing rows of out.
template <typename T, typename F8>
__global__ void cast_transposed_kernel(const T* x, int64_t rows, int64_t cols, int64_t row_stride, const float* amax,
                                       float largest, uint8_t* out, float* scale_inv) {
  __shared__ float tile[kTile][kTile + 1];
  const float scale = scale_of(*amax, largest);
  if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0 && threadIdx.y == 0) *scale_inv = 1.0f / scale;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * kTile, c0 = static_cast<int64_t>(blockIdx.x) * kTile;
  for (int j = threadIdx.y; j < kTile; j += kTileRowsPerPass) {
    const int64_t r = r0 + j, c = c0 + threadIdx.x;
    if (r < rows && c < cols) tile[j][threadIdx.x] = to_float(x[r * row_stride + c]);
  }
  __syncthreads();
  for (int j = threadIdx.y; j < kTile; j += kTileRowsPerPass) {
    const int64_t c = c0 + j, r = r0 + threadIdx.x;
    if (c < cols && r < rows) out[c * rows + r] = to_fp8<F8>(tile[threadIdx.x][j] * scale);
  }
}

// Calls fn.template operator()<T, V>() for x's dtype and the widest pack its rows and pointer allow.
template <typename Fn>
void with_packs(const Fp8Source& x, const void* out, Fn&& fn) {
  const int element_bytes = x.dtype == KernelDtype::fp32 ? 4 : 2;
  const void* in_pointers[1] = {x.data};
  int width = widest_vector_width(x.cols, element_bytes, in_pointers, 1, 1);
  // The rows after the first start where the first does plus a multiple of the stride; the output's rows
  // are `cols` bytes apart.
  while (width > 1 && (x.row_stride % width != 0 || reinterpret_cast<std::uintptr_t>(out) % width != 0)) width /= 2;
  dispatch(x.dtype, width, fn);
}

}  // namespace

float fp8_largest(Fp8Format format) { return format == Fp8Format::e4m3 ? 448.0f : 57344.0f; }

void launch_fp8_amax(const Fp8Source& x, float* amax, void* cuda_stream) {
  const auto stream = static_cast<cudaStream_t>(cuda_stream);
  if (cudaMemsetAsync(amax, 0, sizeof(float), stream) != cudaSuccess) check_launch("fp8 absolute maximum (zeroing)");
  if (x.rows * x.cols == 0) return;
  with_packs(x, x.data, [&]<typename T, int V>() {
    constexpr auto kernel = amax_kernel<T, V>;
    const int64_t packs = x.rows * (x.cols / V);
    const int64_t blocks = std::min(one_wave_blocks<kernel>(kThreads), (packs + kThreads - 1) / kThreads);
    kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(static_cast<const T*>(x.data), x.rows, x.cols,
                                                                   x.row_stride, amax);
  });
  check_launch("fp8 absolute maximum");
}

void launch_fp8_cast(const Fp8Source& x, const float* amax, Fp8Format format, bool transposed, uint8_t* out,
                     float* scale_inv, void* cuda_stream) {
  const auto stream = static_cast<cudaStream_t>(cuda_stream);
  const float largest = fp8_largest(format);
  auto launch = [&]<typename F8>() {
    if (transposed) {
      if (x.rows > kFp8TransposedMaxRows) throw std::invalid_argument("fp8 transposed cast: too many rows");
      const dim3 threads(kTile, kTileRowsPerPass);
      const dim3 blocks(static_cast<unsigned>((x.cols + kTile - 1) / kTile),
                        static_cast<unsigned>(std::max<int64_t>(1, (x.rows + kTile - 1) / kTile)));
      dispatch(x.dtype, 1, [&]<typename T, int>() {
        cast_transposed_kernel<T, F8><<<blocks, threads, 0, stream>>>(static_cast<const T*>(x.data), x.rows, x.cols,
                                                                      x.row_stride, amax, largest, out, scale_inv);
      });
      return;
    }
    with_packs(x, out, [&]<typename T, int V>() {
      constexpr auto kernel = cast_kernel<T, V, F8>;
      const int64_t packs = x.rows * (x.cols / V);
      const int64_t blocks =
          std::max<int64_t>(1, std::min(one_wave_blocks<kernel>(kThreads), (packs + kThreads - 1) / kThreads));
      kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(static_cast<const T*>(x.data), x.rows, x.cols,
                                                                     x.row_stride, amax, largest, out, scale_inv);
    });
  };
  if (format == Fp8Format::e4m3) launch.template operator()<__nv_fp8_e4m3>();
  else launch.template operator()<__nv_fp8_e5m2>();
  check_launch("fp8 cast");
}

}  // namespace zest
