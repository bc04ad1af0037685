// Page-locked host tensors for buffers that cross PCIe every step (optimizer offload). Allocated
// exactly (the caching host allocator would round a 41 GB master up to 64 GB) and zero-filled.
#pragma once

#include <torch/torch.h>

namespace zest {

// A zeroed host tensor of `numel` elements, page-locked when `for_device` is a GPU (so copies to and
// from it are asynchronous DMA), ordinary host memory otherwise.
torch::Tensor zeroed_host_tensor(int64_t numel, torch::Dtype dtype, const torch::Device& for_device);
// The same without the zero fill (a staging buffer every use overwrites whole).
torch::Tensor host_tensor(int64_t numel, torch::Dtype dtype, const torch::Device& for_device);

}  // namespace zest
