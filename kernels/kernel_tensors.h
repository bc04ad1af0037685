// LibTorch's side of the model kernels (*.cu in kernels/): which tensor dtypes they take, the
// KernelDtype of one, and the CUDA stream a launch goes on (kernel_tensors_cuda.cpp, CUDA builds only).
#pragma once

#include "kernels/kernel_dtype.h"

#include <torch/torch.h>

namespace zest {

inline bool is_kernel_dtype(torch::ScalarType dtype) {
  return dtype == torch::kFloat32 || dtype == torch::kBFloat16 || dtype == torch::kFloat16;
}

// For a dtype is_kernel_dtype accepts.
inline KernelDtype kernel_dtype_of(torch::ScalarType dtype) {
  return dtype == torch::kFloat32 ? KernelDtype::fp32 : dtype == torch::kBFloat16 ? KernelDtype::bf16 : KernelDtype::fp16;
}

// The data pointers of up to 8 tensors, as the kernels' alignment checks take them.
class DataPointers {
 public:
  DataPointers(std::initializer_list<torch::Tensor> tensors) {
    TORCH_CHECK(tensors.size() <= 8, "DataPointers holds at most 8 tensors");
    for (const auto& t : tensors) pointers_[count_++] = t.data_ptr();
  }
  const void* const* data() const { return pointers_; }
  int size() const { return count_; }

 private:
  const void* pointers_[8] = {};
  int count_ = 0;
};

// The current CUDA stream of t's device, as the kernels' launch functions take it.
void* current_stream_of(const torch::Tensor& t);

}  // namespace zest
