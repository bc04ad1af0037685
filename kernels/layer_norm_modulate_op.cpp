// uses_layer_norm_modulate_kernels and uses_layer_norm_affine_kernels (see layer_norm_modulate_op.h); the
// kernels' autograd functions are in layer_norm_modulate_cuda.cpp.
#include "kernels/layer_norm_modulate_op.h"

#include "core/check.h"
#include "core/kernel_switches.h"
#include "kernels/fused_paths.h"
#include "kernels/kernel_tensors.h"

#include <string>

namespace zest {

#ifdef ZEST_WITH_CUDA
bool layer_norm_modulate_covers(int64_t dim);  // layer_norm_modulate.h (nvcc-compiled)

namespace {

// [batch, 1, D] with D contiguous, on x's device and in its dtype.
bool is_per_sample(const torch::Tensor& m, const torch::Tensor& x, int64_t batch) {
  return m.dim() == 3 && m.size(0) == batch && m.size(1) == 1 && m.size(2) == x.size(-1) && m.stride(2) == 1 &&
         m.scalar_type() == x.scalar_type() && m.device() == x.device();
}

}  // namespace
#endif

bool uses_layer_norm_modulate_kernels(const torch::Tensor& x, const torch::Tensor& shift, const torch::Tensor& scale,
                                      const SampleRows* samples) {
#ifdef ZEST_WITH_CUDA
  if (!x.is_cuda()) return false;
  const int64_t batch = per_sample_batch(x, samples);
  const bool layout = batch >= 0 && x.numel() > 0 && is_kernel_dtype(x.scalar_type()) &&
                      is_per_sample(shift, x, batch) && is_per_sample(scale, x, batch);
  const bool covered = layout && layer_norm_modulate_covers(x.size(-1));
  note_fused_path("layer_norm_modulate", covered,
                  !layout ? (samples ? "packed input not [rows, D] with per-sample [B, 1, D] shift and scale of its dtype"
                                     : "input not [B, S, D] with per-sample [B, 1, D] shift and scale of its dtype")
                          : "width " + std::to_string(x.size(-1)) + " not covered (1 to 8192)");
  return covered;
#else
  (void)x, (void)shift, (void)scale, (void)samples;
  return false;
#endif
}

namespace {
KernelSwitch& affine_switch() {  // [engine.kernels] layer_norm_kernels (core/kernel_switches.h)
  static KernelSwitch& on = kernel_switch("layer_norm_kernels");
  return on;
}

#ifdef ZEST_WITH_CUDA
// Why the affine kernels cannot take these inputs, or nothing when they can.
std::string affine_refusal(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  if (!layer_norm_kernels_enabled()) return "switched off ([engine.kernels] layer_norm_kernels = false)";
  const auto is_vector = [&](const torch::Tensor& p) {
    return p.defined() && p.dim() == 1 && p.size(0) == x.size(-1) && p.is_contiguous() &&
           p.scalar_type() == x.scalar_type() && p.device() == x.device();
  };
  if (x.dim() < 1 || x.numel() == 0 || !is_kernel_dtype(x.scalar_type()) || !is_vector(weight) || !is_vector(bias)) {
    return "input not [..., D] with weight and bias [D] of its dtype";
  }
  if (!layer_norm_modulate_covers(x.size(-1))) {
    return "width " + std::to_string(x.size(-1)) + " not covered (1 to 8192)";
  }
  return "";
}
#endif
}  // namespace

bool layer_norm_kernels_enabled() { return affine_switch().enabled(); }
void set_layer_norm_kernels(bool enabled) { affine_switch().set(enabled); }

bool uses_layer_norm_affine_kernels(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
#ifdef ZEST_WITH_CUDA
  if (!x.is_cuda()) return false;
  const std::string why = affine_refusal(x, weight, bias);
  note_fused_path("layer_norm_affine", why.empty(), why);
  return why.empty();
#else
  (void)x, (void)weight, (void)bias;
  return false;
#endif
}

#ifndef ZEST_WITH_CUDA
torch::Tensor layer_norm_affine_with_kernels(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&, double) {
  ZEST_FAIL("affine layer-norm kernels: this zest was built without CUDA");
}

torch::Tensor layer_norm_modulate_with_kernels(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&,
                                               double, const SampleRows*) {
  ZEST_FAIL("modulated layer-norm kernels: this zest was built without CUDA");
}
#endif

}  // namespace zest
