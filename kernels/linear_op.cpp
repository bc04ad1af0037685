// linear and its switch (see linear_op.h); the CUDA autograd function is in linear_cuda.cpp.
#include "kernels/linear_op.h"

#include "core/kernel_switches.h"

namespace zest {

#ifdef ZEST_WITH_CUDA
torch::Tensor accumulating_linear_cuda(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias);
LinearGradFusionCounts accumulating_linear_counts();
#endif

namespace {
KernelSwitch& fusion_switch() {  // [engine.kernels] linear_grad_fusion (core/kernel_switches.h)
  static KernelSwitch& on = kernel_switch("linear_grad_fusion");
  return on;
}

[[maybe_unused]] bool is_trainable_leaf(const torch::Tensor& t) { return t.requires_grad() && t.is_leaf(); }
}  // namespace

bool linear_grad_fusion_enabled() { return fusion_switch().enabled(); }
void set_linear_grad_fusion(bool enabled) { fusion_switch().set(enabled); }

bool trains_into_grad_slots(const torch::Tensor& weight, const torch::Tensor& bias) {
#ifdef ZEST_WITH_CUDA
  const auto dtype = weight.scalar_type();
  const bool half_dtype = dtype == torch::kBFloat16 || dtype == torch::kFloat16;
  const bool bias_ok = !bias.defined() || (is_trainable_leaf(bias) && bias.scalar_type() == dtype &&
                                           bias.dim() == 1 && bias.size(0) == weight.size(0) &&
                                           bias.device() == weight.device());
  return linear_grad_fusion_enabled() && torch::GradMode::is_enabled() && half_dtype && weight.is_cuda() &&
         is_trainable_leaf(weight) && bias_ok;
#else
  (void)weight, (void)bias;
  return false;
#endif
}

bool accumulates_weight_grads(const torch::Tensor& weight, const torch::Tensor& bias) {
  const bool matrix = weight.dim() == 2 || (weight.dim() == 4 && weight.size(2) == 1 && weight.size(3) == 1 &&
                                             weight.is_contiguous());
  return matrix && trains_into_grad_slots(weight, bias);
}

bool uses_accumulating_linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  return accumulates_weight_grads(weight, bias) && x.scalar_type() == weight.scalar_type() &&
         x.device() == weight.device() && x.dim() >= 2 && x.size(-1) == weight.size(1) && x.numel() > 0;
}

torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
#ifdef ZEST_WITH_CUDA
  if (uses_accumulating_linear(x, weight, bias)) return accumulating_linear_cuda(x, weight, bias);
#endif
  return torch::linear(x, weight, bias);
}

LinearGradFusionCounts linear_grad_fusion_counts() {
#ifdef ZEST_WITH_CUDA
  return accumulating_linear_counts();
#else
  return {};
#endif
}

}  // namespace zest
