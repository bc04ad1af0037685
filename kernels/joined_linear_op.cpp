// joined_gelu_linear and its switch (see joined_linear_op.h); the CUDA autograd function is in
// joined_linear_cuda.cpp.
#include "kernels/joined_linear_op.h"

#include "core/check.h"
#include "core/kernel_switches.h"
#include "kernels/concat_gelu_op.h"
#include "kernels/linear_op.h"
#include "kernels/recomputed_linear_op.h"

namespace zest {

#ifdef ZEST_WITH_CUDA
torch::Tensor joined_gelu_linear_cuda(const torch::Tensor& left, const torch::Tensor& right,
                                      const torch::Tensor& weight, const torch::Tensor& bias,
                                      const torch::Tensor& activated, bool keep_activation);
#endif

namespace {
KernelSwitch& joined_switch() {  // [engine.kernels] joined_linear (core/kernel_switches.h)
  static KernelSwitch& on = kernel_switch("joined_linear");
  return on;
}

// The accumulating path's conditions (linear_op.h) for the two inputs: one 16-bit dtype and device with the
// weight, the same leading dimensions.
[[maybe_unused]] bool takes_two_products(const torch::Tensor& left, const torch::Tensor& right,
                                         const torch::Tensor& weight, const torch::Tensor& bias) {
  const auto same_place = [&](const torch::Tensor& t) {
    return t.scalar_type() == weight.scalar_type() && t.device() == weight.device() && t.dim() >= 2 && t.numel() > 0;
  };
  return accumulates_weight_grads(weight, bias) && same_place(left) && same_place(right) &&
         left.sizes().slice(0, left.dim() - 1) == right.sizes().slice(0, right.dim() - 1);
}

}  // namespace

bool joined_linear_enabled() { return joined_switch().enabled(); }
void set_joined_linear(bool enabled) { joined_switch().set(enabled); }

torch::Tensor joined_gelu_linear(const torch::Tensor& left, const torch::Tensor& right, const torch::Tensor& weight,
                                 const torch::Tensor& bias, [[maybe_unused]] const torch::Tensor& activated) {
  ZEST_CHECK(left.size(-1) + right.size(-1) == weight.size(1), "joined_gelu_linear: inputs of ", left.size(-1),
             " + ", right.size(-1), " columns for a weight of ", weight.size(1));
  constexpr auto f = RecomputedActivation::concat_gelu_tanh;
#ifdef ZEST_WITH_CUDA
  if (joined_linear_enabled() && takes_two_products(left, right, weight, bias)) {
    return joined_gelu_linear_cuda(left, right, weight, bias, activated, /*keep_activation=*/!recomputes_here(f));
  }
#endif
  if (uses_recomputed_linear(f, left, weight, bias)) return linear_of_recomputed(f, left, right, weight, bias);
  return linear(concat_gelu_tanh(left, right), weight, bias);
}

}  // namespace zest
