// The autograd function of linear_plus (see residual_linear_op.h): forward is one residual-epilogue product
// (residual_epilogue_gemm.h) or, where cuBLASLt refuses it, linear()'s product and an add; backward is the
// accumulating linear's, and the residual's gradient is the output's.
#include "kernels/fused_paths.h"
#include "kernels/linear_backward.h"
#include "kernels/residual_epilogue_gemm.h"
#include "kernels/residual_linear_op.h"

#include <torch/csrc/autograd/custom_function.h>

namespace zest {
namespace {

struct LinearPlus : torch::autograd::Function<LinearPlus> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& weight, const torch::Tensor& bias, const torch::Tensor& residual) {
    const auto x2 = x.reshape({-1, weight.size(1)});  // a view where x allows one
    const torch::Tensor b = present(bias);
    save_for_linear_backward(ctx, x2, weight, b, x.sizes());
    const auto residual2 = residual.reshape({-1, weight.size(0)});
    const auto w = matrix_of(weight);  // a pointwise convolution's [out, in, 1, 1] as [out, in]
    auto y2 = linear_plus_residual(x2, w, b, residual2);
    note_fused_path("residual_epilogue", y2.has_value(),
                    "cuBLASLt offered no algorithm, or the operands are not 16-byte aligned 16-bit rows");
    if (!y2) y2 = forward_product(ProductInput::activation(x2), w, b) + residual2;
    return y2->view(residual.sizes());
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const LinearGrads g = saved_linear_backward(ctx, grads[0]);
    return {g.dinput, g.dweight, g.dbias, grads[0]};
  }
};

}  // namespace

torch::Tensor linear_plus_cuda(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                               const torch::Tensor& residual) {
  return LinearPlus::apply(x, weight, bias.defined() ? bias : absent_tensor(weight), residual);
}

}  // namespace zest
