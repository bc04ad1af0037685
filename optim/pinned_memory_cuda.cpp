// Page-locked host tensors (see pinned_memory.h): cudaHostAlloc of the exact size, freed with the tensor.
#include "optim/pinned_memory.h"

#include "core/check.h"

#include <cuda_runtime.h>

namespace zest {

torch::Tensor host_tensor(int64_t numel, torch::Dtype dtype, const torch::Device& for_device) {
  if (!for_device.is_cuda()) return torch::empty({numel}, torch::TensorOptions().dtype(dtype));
  const size_t bytes = static_cast<size_t>(numel) * torch::elementSize(dtype);
  void* data = nullptr;
  const cudaError_t err = cudaHostAlloc(&data, std::max<size_t>(bytes, 1), cudaHostAllocDefault);
  ZEST_CHECK(err == cudaSuccess, "could not page-lock ", static_cast<double>(bytes) / 1e9,
             " GB of host memory: ", cudaGetErrorString(err));
  return torch::from_blob(data, {numel}, [](void* p) { cudaFreeHost(p); }, torch::TensorOptions().dtype(dtype));
}

torch::Tensor zeroed_host_tensor(int64_t numel, torch::Dtype dtype, const torch::Device& for_device) {
  auto tensor = host_tensor(numel, dtype, for_device);
  tensor.zero_();
  return tensor;
}

}  // namespace zest
