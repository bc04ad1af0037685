// concat_gelu_tanh (see concat_gelu_op.h): the CUDA kernels' autograd function is in concat_gelu_cuda.cpp.
#include "kernels/fused_paths.h"
#include "kernels/concat_gelu_op.h"

#include "kernels/kernel_tensors.h"

namespace zest {

#ifdef ZEST_WITH_CUDA
torch::Tensor concat_gelu_cuda(const torch::Tensor& left, const torch::Tensor& right);
#endif

namespace {

// Packed rows [N, W] as one batch [1, N, W]: the kernels' layout.
torch::Tensor batched(const torch::Tensor& t) { return t.dim() == 2 ? t.unsqueeze(0) : t; }

// [B, L, W] whose B·L rows are one stride apart with W contiguous.
[[maybe_unused]] bool has_even_rows(const torch::Tensor& t) {
  return t.dim() == 3 && t.stride(2) == 1 && (t.size(0) == 1 || t.stride(0) == t.size(1) * t.stride(1));
}

}  // namespace

bool uses_concat_gelu_kernels(const torch::Tensor& left_rows, const torch::Tensor& right_rows) {
#ifdef ZEST_WITH_CUDA
  if (!left_rows.is_cuda()) return false;
  const auto left = batched(left_rows), right = batched(right_rows);
  const auto dtype = left.scalar_type();
  const bool covered = is_kernel_dtype(dtype) && right.scalar_type() == dtype && right.device() == left.device() &&
                       left_rows.dim() == right_rows.dim() && has_even_rows(left) && has_even_rows(right) &&
                       left.size(0) == right.size(0) && left.size(1) == right.size(1) && left.numel() > 0 &&
                       right.numel() > 0;
  note_fused_path("concat_gelu", covered, "halves not [B, L, W] or [rows, W] with evenly spaced rows of one dtype");
  return covered;
#else
  (void)left_rows, (void)right_rows;
  return false;
#endif
}

torch::Tensor concat_gelu_tanh(const torch::Tensor& left, const torch::Tensor& right) {
#ifdef ZEST_WITH_CUDA
  if (uses_concat_gelu_kernels(left, right)) {
    const auto joined = concat_gelu_cuda(batched(left), batched(right));
    return left.dim() == 2 ? joined.squeeze(0) : joined;  // packed rows back to [N, W]
  }
#endif
  return torch::cat({left, torch::gelu(right, "tanh")}, -1);
}

}  // namespace zest
