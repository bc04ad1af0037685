// uses_rope_kernels (see rope_op.h); the kernels' autograd function is in rope_cuda.cpp.
#include "kernels/fused_paths.h"
#include "kernels/rope_op.h"

#include "kernels/kernel_tensors.h"

#include "core/check.h"

namespace zest {

bool uses_rope_kernels(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
#ifdef ZEST_WITH_CUDA
  const auto dtype = x.scalar_type();
  const bool tables = cos.scalar_type() == torch::kFloat32 && sin.scalar_type() == torch::kFloat32 &&
                      cos.device() == x.device() && sin.device() == x.device() && cos.is_contiguous() &&
                      sin.is_contiguous() && cos.dim() == 2 && cos.sizes() == sin.sizes();
  if (!x.is_cuda()) return false;
  const bool covered = x.dim() == 4 && x.is_contiguous() && x.numel() > 0 && tables && is_kernel_dtype(dtype) &&
                       cos.size(1) == x.size(3) && x.size(3) % 2 == 0 && cos.size(0) <= x.size(1);
  note_fused_path("rope", covered, "input not contiguous [B, S, H, d] with even d and float32 [≤ S, d] tables");
  return covered;
#else
  (void)x, (void)cos, (void)sin;
  return false;
#endif
}

#ifndef ZEST_WITH_CUDA
torch::Tensor rope_with_kernels(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&) {
  ZEST_FAIL("RoPE kernels: this zest was built without CUDA");
}
#endif

}  // namespace zest
