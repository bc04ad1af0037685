// geglu (see geglu_op.h): the CUDA kernels' autograd function is in geglu_cuda.cpp.
#include "kernels/fused_paths.h"
#include "kernels/geglu_op.h"

#include "kernels/kernel_tensors.h"

namespace zest {

#ifdef ZEST_WITH_CUDA
torch::Tensor geglu_cuda(const torch::Tensor& proj);
#endif

bool uses_geglu_kernels(const torch::Tensor& proj) {
#ifdef ZEST_WITH_CUDA
  if (!proj.is_cuda()) return false;
  const bool covered = proj.is_contiguous() && proj.dim() >= 1 && proj.numel() > 0 && proj.size(-1) % 2 == 0 &&
                       is_kernel_dtype(proj.scalar_type());
  note_fused_path("geglu", covered, "projection not contiguous with an even last dim");
  return covered;
#else
  (void)proj;
  return false;
#endif
}

torch::Tensor geglu(const torch::Tensor& proj) {
#ifdef ZEST_WITH_CUDA
  if (uses_geglu_kernels(proj)) return geglu_cuda(proj);
#endif
  const auto halves = proj.chunk(2, -1);
  return halves[0] * torch::gelu(halves[1]);
}

}  // namespace zest
