// uses_rms_norm_kernels (see rms_norm_op.h); the kernels' autograd function is in rms_norm_cuda.cpp.
#include "kernels/rms_norm_op.h"

#include "kernels/fused_paths.h"
#include "kernels/kernel_tensors.h"

#include <string>

#include "core/check.h"

namespace zest {

#ifdef ZEST_WITH_CUDA
bool rms_norm_covers(int64_t head_dim);  // rms_norm.h (nvcc-compiled)
#endif

bool uses_rms_norm_kernels(const torch::Tensor& x, const torch::Tensor& weight) {
#ifdef ZEST_WITH_CUDA
  if (!x.is_cuda()) return false;
  const auto dtype = x.scalar_type();
  const bool layout = x.dim() == 4 && x.numel() > 0 && x.stride(3) == 1 && is_kernel_dtype(dtype) &&
                      weight.scalar_type() == dtype && weight.device() == x.device() && weight.dim() == 1 &&
                      weight.size(0) == x.size(3) && weight.is_contiguous();
  const bool covered = layout && rms_norm_covers(x.size(3));
  note_fused_path("rms_norm", covered,
                  !layout ? "input not [B, S, H, d] with d contiguous and a [d] weight of its dtype"
                          : "head dim " + std::to_string(x.size(3)) + " not covered (1 to 256)");
  return covered;
#else
  (void)x, (void)weight;
  return false;
#endif
}

#ifndef ZEST_WITH_CUDA
torch::Tensor rms_norm_with_kernels(const torch::Tensor&, const torch::Tensor&, double) {
  ZEST_FAIL("RMSNorm kernels: this zest was built without CUDA");
}
#endif

}  // namespace zest
