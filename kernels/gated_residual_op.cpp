// gated_residual (see gated_residual_op.h): the CUDA kernels' autograd function is in gated_residual_cuda.cpp.
#include "kernels/fused_paths.h"
#include "kernels/gated_residual_op.h"

#include "kernels/kernel_tensors.h"

namespace zest {

#ifdef ZEST_WITH_CUDA
torch::Tensor gated_residual_cuda(const torch::Tensor& x, const torch::Tensor& y, const torch::Tensor& gate,
                                  const SampleRows* samples);
#endif

bool uses_gated_residual_kernels(const torch::Tensor& x, const torch::Tensor& y, const torch::Tensor& gate,
                                 const SampleRows* samples) {
#ifdef ZEST_WITH_CUDA
  if (!x.is_cuda()) return false;
  const auto dtype = x.scalar_type();
  const int64_t batch = per_sample_batch(x, samples);
  const bool covered = batch >= 0 && x.numel() > 0 && is_kernel_dtype(dtype) && y.sizes() == x.sizes() &&
                       y.scalar_type() == dtype && y.device() == x.device() && gate.dim() == 3 &&
                       gate.size(0) == batch && gate.size(1) == 1 && gate.size(2) == x.size(-1) &&
                       gate.stride(2) == 1 && gate.scalar_type() == dtype && gate.device() == x.device();
  note_fused_path("gated_residual", covered,
                  samples ? "packed inputs not [rows, D] with a per-sample [B, 1, D] gate of their dtype"
                          : "inputs not [B, S, D] with a per-sample [B, 1, D] gate of their dtype");
  return covered;
#else
  (void)x, (void)y, (void)gate, (void)samples;
  return false;
#endif
}

torch::Tensor gated_residual(const torch::Tensor& x, const torch::Tensor& y, const torch::Tensor& gate,
                             const SampleRows* samples) {
#ifdef ZEST_WITH_CUDA
  if (uses_gated_residual_kernels(x, y, gate, samples)) return gated_residual_cuda(x, y, gate, samples);
#endif
  if (samples) return x + y * gate.squeeze(1).index_select(0, samples->sample);
  return x + y * gate;
}

}  // namespace zest
