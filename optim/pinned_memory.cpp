// Host tensors for offload without CUDA (see pinned_memory.h): ordinary memory.
#include "optim/pinned_memory.h"

#include "core/check.h"

namespace zest {

#ifndef ZEST_WITH_CUDA
torch::Tensor zeroed_host_tensor(int64_t numel, torch::Dtype dtype, const torch::Device& for_device) {
  ZEST_CHECK(!for_device.is_cuda(), "page-locked memory for ", for_device, " needs a CUDA build");
  return torch::zeros({numel}, torch::TensorOptions().dtype(dtype));
}

torch::Tensor host_tensor(int64_t numel, torch::Dtype dtype, const torch::Device& for_device) {
  ZEST_CHECK(!for_device.is_cuda(), "page-locked memory for ", for_device, " needs a CUDA build");
  return torch::empty({numel}, torch::TensorOptions().dtype(dtype));
}
#endif

}  // namespace zest
