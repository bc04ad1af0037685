// Free and total memory of a CUDA device, for the pre-flight check (see preflight.h).
#include "core/check.h"

#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime.h>

namespace zest {

int64_t cuda_free_bytes(int device_index) {
  const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device_index));
  size_t free_bytes = 0, total_bytes = 0;
  const cudaError_t err = cudaMemGetInfo(&free_bytes, &total_bytes);
  ZEST_CHECK(err == cudaSuccess, "cudaMemGetInfo failed: ", cudaGetErrorString(err));
  return static_cast<int64_t>(free_bytes);
}

int64_t cuda_total_bytes(int device_index) {
  const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device_index));
  size_t free_bytes = 0, total_bytes = 0;
  const cudaError_t err = cudaMemGetInfo(&free_bytes, &total_bytes);
  ZEST_CHECK(err == cudaSuccess, "cudaMemGetInfo failed: ", cudaGetErrorString(err));
  return static_cast<int64_t>(total_bytes);
}

}  // namespace zest
