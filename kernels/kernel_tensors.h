// LibTorch's side of the model kernels (*.cu in kernels/): which tensor dtypes they take, the
// KernelDtype of one, and the CUDA stream a launch goes on (kernel_tensors_cuda.cpp, CUDA builds only).
#pragma once

#include "kernels/kernel_dtype.h"
#include "kernels/packed_samples.h"

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

// Custom autograd functions take no undefined tensors: an absent optional input goes in as an empty tensor
// (absent_tensor), and present() turns it back into an undefined one.
inline torch::Tensor absent_tensor(const torch::Tensor& like) {
  return torch::empty({0}, like.options().requires_grad(false));
}
inline torch::Tensor present(const torch::Tensor& t) { return t.defined() && t.numel() > 0 ? t : torch::Tensor(); }

// Rows of several samples packed one after another (kernels/packed_samples.h) as tensors: `starts` for the
// kernels, `sample` (each row's sample) for the ATen forms, which gather per-sample values row by row.
struct SampleRows {
  torch::Tensor starts;  // int32 [batch + 1] on the rows' device: sample b's rows are starts[b] .. starts[b + 1] − 1
  torch::Tensor sample;  // int64 [rows] on the rows' device: each row's sample
  int64_t longest = 0;   // the most rows of one sample

  int64_t batch() const { return starts.size(0) - 1; }
  int64_t rows() const { return sample.size(0); }
};

// The autograd functions over the per-sample kernels take `starts` as a tensor argument: for inputs that are
// not packed an empty one (not an undefined one: LibTorch reads every tensor argument's device), which
// packed_samples() turns into the kernels' "same row count" form.
inline torch::Tensor unpacked_starts(const torch::Tensor& like) {
  return torch::empty({0}, like.options().dtype(torch::kInt));
}
inline PackedSamples packed_samples(const torch::Tensor& starts, int64_t rows) {
  if (starts.numel() == 0) return {};
  return {starts.data_ptr<int32_t>(), rows};
}

// The sample count of a per-sample kernel's input: x [B, S, D] when `samples` is null, or the packed rows
// [rows, D] of `samples`; −1 when x has neither layout.
inline int64_t per_sample_batch(const torch::Tensor& x, const SampleRows* samples) {
  if (samples) return x.dim() == 2 && x.size(0) == samples->rows() ? samples->batch() : -1;
  return x.dim() == 3 ? x.size(0) : -1;
}

// The current CUDA stream of t's device, as the kernels' launch functions take it.
void* current_stream_of(const torch::Tensor& t);

}  // namespace zest
