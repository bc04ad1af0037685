// The autograd function of joined_gelu_linear (see joined_linear_op.h): forward runs GELU over right (unless
// handed it) and two products over W's column blocks; backward takes each input's gradient from its own
// block of W (right's through the GELU-backward epilogue where cuBLASLt has one) and accumulates each
// block's weight gradient into the matching columns of the .grad slot.
#include "kernels/joined_linear_op.h"
#include "kernels/linear_backward.h"
#include "kernels/weight_grad_gemm.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

namespace zest {
namespace {

torch::Tensor gelu_tanh(const torch::Tensor& x) { return at::gelu(x, "tanh"); }

struct JoinedGeluLinear : torch::autograd::Function<JoinedGeluLinear> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& left,
                               const torch::Tensor& right, const torch::Tensor& weight, const torch::Tensor& bias,
                               const torch::Tensor& given_activation, bool keep_activation) {
    const int64_t left_width = left.size(-1), right_width = right.size(-1);
    const auto w = matrix_of(weight);
    const torch::Tensor b = present(bias);
    const auto left2 = left.reshape({-1, left_width});
    const torch::Tensor given = present(given_activation);
    const auto activated = (given.defined() ? given : gelu_tanh(right)).reshape({-1, right_width});
    auto y = forward_product(ProductInput::activation(left2), w.narrow(1, 0, left_width), b);
    add_forward_product(y, ProductInput::activation(activated), w.narrow(1, left_width, right_width));  // beta = 1
    // left is what attention keeps for its own backward, right what linear1's MLP half is: only the
    // activation, when kept, adds to what stays alive until backward.
    ctx->save_for_backward({left, right, keep_activation ? activated : absent_tensor(activated)});
    ctx->saved_data["weight"] = weight;  // the parameters themselves: backward reads their .grad slots
    ctx->saved_data["bias"] = b;
    auto out_sizes = left.sizes().vec();
    out_sizes.back() = weight.size(0);
    return y.view(out_sizes);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto& left = saved[0];
    const auto& right = saved[1];
    const int64_t left_width = left.size(-1), right_width = right.size(-1);
    const auto weight = ctx->saved_data["weight"].toTensor();
    const auto bias = optional_tensor(ctx->saved_data["bias"]);
    const auto dtype = weight.scalar_type();
    const auto w = matrix_of(weight);
    const auto dy = grads[0].reshape({-1, weight.size(0)}).to(dtype).contiguous();
    const torch::Tensor kept = present(saved[2]);
    const auto activated = kept.defined() ? kept : gelu_tanh(right).reshape({-1, right_width});
    const auto left2 = left.reshape({-1, left_width}).contiguous();

    torch::Tensor dleft, dright;
    const ProductInput dy_input = ProductInput::gradient(dy);  // cast to fp8 once for both products, with fp8
    if (ctx->needs_input_grad(0)) dleft = input_grad_product(dy_input, w.narrow(1, 0, left_width)).view(left.sizes());
    if (ctx->needs_input_grad(1)) {
      const auto w_right = w.narrow(1, left_width, right_width);
      if (auto dh = gelu_input_grad_product(dy_input, w_right, right.reshape({-1, right_width}))) {
        dright = dh->view(right.sizes());
      } else {
        dright = at::gelu_backward(input_grad_product(dy_input, w_right).view(right.sizes()), right, "tanh");
      }
    }
    torch::Tensor dweight, dbias;
    const GradSlots slots = grad_slots_of(weight, bias);
    if (slots.usable) {
      const auto slot = matrix_of(slots.weight);
      accumulate_weight_grads(dy, left2, slot.narrow(1, 0, left_width), slots.bias, dtype);
      accumulate_weight_grads(dy, activated, slot.narrow(1, left_width, right_width), torch::Tensor(), dtype);
    } else {
      dweight = torch::cat({torch::mm(dy.t(), left2), torch::mm(dy.t(), activated)}, 1).view(weight.sizes());
      if (bias.defined()) dbias = dy.sum(0);
    }
    count_linear_backward(slots.usable);
    return {dleft, dright, dweight, dbias, torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor joined_gelu_linear_cuda(const torch::Tensor& left, const torch::Tensor& right,
                                      const torch::Tensor& weight, const torch::Tensor& bias,
                                      const torch::Tensor& activated, bool keep_activation) {
  return JoinedGeluLinear::apply(left, right, weight, bias.defined() ? bias : absent_tensor(weight),
                                 activated.defined() ? activated : absent_tensor(weight), keep_activation);
}

}  // namespace zest
