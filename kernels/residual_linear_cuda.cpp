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
    ctx->save_for_backward({x2});
    const torch::Tensor b = present(bias);
    ctx->saved_data["weight"] = weight;  // the parameters themselves: backward reads their .grad slots
    ctx->saved_data["bias"] = b;
    ctx->saved_data["input_sizes"] = x.sizes().vec();
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
    const auto x2 = ctx->get_saved_variables()[0];
    const auto weight = ctx->saved_data["weight"].toTensor();
    const auto bias = optional_tensor(ctx->saved_data["bias"]);
    LinearGrads g = linear_backward(grads[0], x2, weight, bias, ctx->needs_input_grad(0));
    if (g.dinput.defined()) g.dinput = g.dinput.view(ctx->saved_data["input_sizes"].toIntVector());
    return {g.dinput, g.dweight, g.dbias, grads[0]};
  }
};

}  // namespace

torch::Tensor linear_plus_cuda(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                               const torch::Tensor& residual) {
  return LinearPlus::apply(x, weight, bias.defined() ? bias : absent_tensor(weight), residual);
}

}  // namespace zest
