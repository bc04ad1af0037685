// linear_plus and its switch (see residual_linear_op.h); the CUDA autograd function is in residual_linear_cuda.cpp.
#include "kernels/residual_linear_op.h"

#include "core/kernel_switches.h"
#include "kernels/linear_op.h"
#include "kernels/matmul_precision.h"

namespace zest {

#ifdef ZEST_WITH_CUDA
torch::Tensor linear_plus_cuda(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                               const torch::Tensor& residual);
#endif

namespace {
KernelSwitch& residual_switch() {  // [engine.kernels] residual_epilogue (core/kernel_switches.h)
  static KernelSwitch& on = kernel_switch("residual_epilogue");
  return on;
}
}  // namespace

bool residual_epilogue_enabled() { return residual_switch().enabled(); }
void set_residual_epilogue(bool enabled) { residual_switch().set(enabled); }

bool uses_residual_epilogue(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                            const torch::Tensor& residual) {
  if (!residual_epilogue_enabled() || fp8_training_products() || !uses_accumulating_linear(x, weight, bias)) {
    return false;
  }
  auto out_sizes = x.sizes().vec();
  out_sizes.back() = weight.size(0);
  return residual.sizes() == c10::IntArrayRef(out_sizes) && residual.scalar_type() == x.scalar_type() &&
         residual.device() == x.device() && residual.is_contiguous();
}

torch::Tensor linear_plus(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                          const torch::Tensor& residual) {
#ifdef ZEST_WITH_CUDA
  if (uses_residual_epilogue(x, weight, bias, residual)) return linear_plus_cuda(x, weight, bias, residual);
#endif
  return linear(x, weight, bias) + residual;
}

}  // namespace zest
