// The autograd function of linear_of_recomputed (see recomputed_linear_op.h): forward keeps f's inputs
// only; backward runs f again (with autograd on, over detached copies of them), takes the Linear's
// gradients from that output, then f's input gradients from f's own backward — or, for a GELU handed in by
// its producer's epilogue, a's gradient from the product with the GELU-backward epilogue.
#include "kernels/linear_backward.h"
#include "kernels/recomputed_linear_op.h"

#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

namespace zest {
namespace {

struct RecomputedLinear : torch::autograd::Function<RecomputedLinear> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& a, const torch::Tensor& b,
                               const torch::Tensor& weight, const torch::Tensor& bias,
                               const torch::Tensor& given_activation, int64_t activation) {
    const auto f = static_cast<RecomputedActivation>(activation);
    const torch::Tensor second = present(b), bias_present = present(bias), given = present(given_activation);
    // autograd is off inside forward: h is not kept
    const auto h = given.defined() ? given : apply_activation(f, a, second);
    ctx->save_for_backward({a, b});
    ctx->saved_data["weight"] = weight;  // the parameters themselves: backward reads their .grad slots
    ctx->saved_data["bias"] = bias_present;
    ctx->saved_data["activation"] = activation;
    ctx->saved_data["gelu_epilogue"] = given.defined() && f == RecomputedActivation::gelu_tanh && !second.defined();
    return linear_forward_2d(ProductInput::activation(h.reshape({-1, weight.size(1)})), weight, bias_present,
                             h.sizes());
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto weight = ctx->saved_data["weight"].toTensor();
    const auto bias = optional_tensor(ctx->saved_data["bias"]);
    const auto f = static_cast<RecomputedActivation>(ctx->saved_data["activation"].toInt());
    const torch::Tensor saved_b = present(saved[1]);
    const bool wants_a = ctx->needs_input_grad(0), wants_b = saved_b.defined() && ctx->needs_input_grad(1);
    if (ctx->saved_data["gelu_epilogue"].toBool()) {
      return gelu_backward_through_product(grads[0], saved[0], weight, bias, wants_a);
    }

    // f again, recorded this time, over leaves standing in for its inputs.
    std::vector<torch::Tensor> leaves;
    torch::Tensor a, b, h;
    {
      torch::AutoGradMode record(wants_a || wants_b);
      a = saved[0].detach().requires_grad_(wants_a);
      if (saved_b.defined()) b = saved_b.detach().requires_grad_(wants_b);
      h = apply_activation(f, a, b);
    }
    LinearGrads g = linear_backward(grads[0], h.detach().reshape({-1, weight.size(1)}), weight, bias,
                                    wants_a || wants_b);
    torch::Tensor da, db;
    if (wants_a || wants_b) {
      if (wants_a) leaves.push_back(a);
      if (wants_b) leaves.push_back(b);
      const auto input_grads = torch::autograd::grad({h}, leaves, {g.dinput.view(h.sizes())},
                                                     /*retain_graph=*/false, /*create_graph=*/false,
                                                     /*allow_unused=*/true);
      if (wants_a) da = input_grads[0];
      if (wants_b) db = input_grads[wants_a ? 1 : 0];
    }
    return {da, db, g.dweight, g.dbias, torch::Tensor(), torch::Tensor()};
  }

  // h = GELU_tanh(a) again for the weight gradient (dW += dYᵀ·h), and da = (dY·W) ⊙ GELU_tanh'(a) from one
  // product with the GELU-backward epilogue (ATen's product and GELU backward where it has none).
  static torch::autograd::variable_list gelu_backward_through_product(const torch::Tensor& grad_output,
                                                                      const torch::Tensor& a, const torch::Tensor& weight,
                                                                      const torch::Tensor& bias, bool wants_a) {
    const auto a2 = a.reshape({-1, weight.size(1)});
    // dY as linear_backward takes it, made once here for both products.
    const auto dy = grad_output.reshape({-1, weight.size(0)}).to(weight.scalar_type()).contiguous();
    LinearGrads g = linear_backward(dy, at::gelu(a2, "tanh"), weight, bias, /*wants_input_grad=*/false);
    torch::Tensor da;
    if (wants_a) {
      const auto w = matrix_of(weight);
      const ProductInput dy_input = ProductInput::gradient(dy);
      auto product = gelu_input_grad_product(dy_input, w, a2.contiguous());
      da = (product ? *product : at::gelu_backward(input_grad_product(dy_input, w), a2, "tanh")).view(a.sizes());
    }
    return {da, torch::Tensor(), g.dweight, g.dbias, torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor recomputed_linear_cuda(RecomputedActivation f, const torch::Tensor& a, const torch::Tensor& b,
                                     const torch::Tensor& weight, const torch::Tensor& bias,
                                     const torch::Tensor& activated) {
  return RecomputedLinear::apply(a, b.defined() ? b : absent_tensor(a), weight,
                                 bias.defined() ? bias : absent_tensor(weight),
                                 activated.defined() ? activated : absent_tensor(a), static_cast<int64_t>(f));
}

}  // namespace zest
