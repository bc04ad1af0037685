// linear_of_recomputed and its switch (see recomputed_linear_op.h); the CUDA autograd function is in
// recomputed_linear_cuda.cpp.
#include "models/common/recomputed_linear_op.h"

#include "core/check.h"
#include "core/env_switch.h"
#include "models/common/concat_gelu_op.h"
#include "models/common/geglu_op.h"
#include "models/common/linear_op.h"

namespace zest {

#ifdef ZEST_WITH_CUDA
torch::Tensor recomputed_linear_cuda(RecomputedActivation f, const torch::Tensor& a, const torch::Tensor& b,
                                     const torch::Tensor& weight, const torch::Tensor& bias);
#endif

namespace {
EnvSwitch& recompute_switch() {
  static EnvSwitch on("ZEST_RECOMPUTE_ACTIVATIONS", /*default_on=*/true);
  return on;
}
}  // namespace

bool activation_recompute_enabled() { return recompute_switch().enabled(); }
void set_activation_recompute(bool enabled) { recompute_switch().set(enabled); }

torch::Tensor apply_activation(RecomputedActivation f, const torch::Tensor& a, const torch::Tensor& b) {
  switch (f) {
    case RecomputedActivation::gelu: return torch::gelu(a);
    case RecomputedActivation::gelu_tanh: return torch::gelu(a, "tanh");
    case RecomputedActivation::silu: return torch::silu(a);
    case RecomputedActivation::geglu: return geglu(a);
    case RecomputedActivation::concat_gelu_tanh: return concat_gelu_tanh(a, b);
  }
  ZEST_FAIL("unknown activation");
}

bool uses_recomputed_linear(const torch::Tensor& a, const torch::Tensor& weight, const torch::Tensor& bias) {
  return activation_recompute_enabled() && accumulates_weight_grads(weight, bias) &&
         a.scalar_type() == weight.scalar_type() && a.device() == weight.device() && a.dim() >= 2 && a.numel() > 0;
}

torch::Tensor linear_of_recomputed(RecomputedActivation f, const torch::Tensor& a, const torch::Tensor& b,
                                   const torch::Tensor& weight, const torch::Tensor& bias) {
#ifdef ZEST_WITH_CUDA
  if (uses_recomputed_linear(a, weight, bias)) return recomputed_linear_cuda(f, a, b, weight, bias);
#endif
  return linear(apply_activation(f, a, b), weight, bias);
}

}  // namespace zest
