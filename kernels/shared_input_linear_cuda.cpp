// The autograd function of shared_input_linear (see shared_input_linear_op.h): each layer's product in forward
// as linear() runs it; in backward dX accumulates over the layers in one buffer and each layer's weight and bias
// gradients go into its .grad slots (weight_grad_gemm.h), or are returned where no slots exist.
#include "kernels/linear_backward.h"
#include "kernels/shared_input_linear_op.h"
#include "kernels/weight_grad_gemm.h"

#include <torch/csrc/autograd/custom_function.h>

namespace zest {
namespace {

// The inputs go in as tensor lists (at::TensorList), which autograd counts tensor by tensor: backward returns
// dX, then one gradient per weight, then one per bias (an absent bias is an empty tensor, its gradient undefined).
struct SharedInputLinear : torch::autograd::Function<SharedInputLinear> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                                                at::TensorList weights, at::TensorList biases) {
    const auto x2 = x.reshape({-1, x.size(-1)});  // a view where x allows one
    ctx->set_materialize_grads(false);  // a layer nothing used hands backward no zeros
    ctx->save_for_backward({x2});
    ctx->saved_data["weights"] = weights.vec();  // the parameters themselves: backward reads their .grad slots
    ctx->saved_data["biases"] = biases.vec();
    ctx->saved_data["input_sizes"] = x.sizes().vec();
    const ProductInput input = ProductInput::activation(x2);  // cast to fp8 once for every layer, with fp8
    torch::autograd::variable_list outputs;
    for (size_t i = 0; i < weights.size(); ++i) {
      outputs.push_back(linear_forward_2d(input, weights[i], present(biases[i]), x.sizes()));
    }
    return outputs;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto x2 = ctx->get_saved_variables()[0].contiguous();
    const auto weights = ctx->saved_data["weights"].toTensorVector();
    const auto biases = ctx->saved_data["biases"].toTensorVector();
    const size_t layers = weights.size();
    torch::autograd::variable_list result(1 + 2 * layers);
    torch::Tensor& dx = result[0];
    for (size_t i = 0; i < layers; ++i) {
      if (!grads[i].defined()) continue;  // a layer nothing used: no gradient flows through it
      const auto& weight = weights[i];
      const auto bias = present(biases[i]);
      const auto dy = grads[i].reshape({-1, weight.size(0)}).to(weight.scalar_type()).contiguous();
      if (ctx->needs_input_grad(0)) add_to_input_grad(dx, dy, weight);
      const GradSlots slots = grad_slots_of(weight, bias);
      if (slots.usable) {
        accumulate_weight_grads(dy, x2, slots.weight, slots.bias, weight.scalar_type());
      } else {
        result[1 + i] = torch::mm(dy.t(), x2);
        if (bias.defined()) result[1 + layers + i] = dy.sum(0);
      }
      count_linear_backward(slots.usable);
    }
    if (dx.defined()) dx = dx.view(ctx->saved_data["input_sizes"].toIntVector());
    return result;
  }
};

}  // namespace

std::vector<torch::Tensor> shared_input_linear_cuda(const torch::Tensor& x, const std::vector<torch::Tensor>& weights,
                                                    const std::vector<torch::Tensor>& biases) {
  std::vector<torch::Tensor> present_or_absent;
  for (size_t i = 0; i < weights.size(); ++i) {
    const bool has_bias = i < biases.size() && biases[i].defined();
    present_or_absent.push_back(has_bias ? biases[i] : absent_tensor(weights[i]));
  }
  return SharedInputLinear::apply(x, at::TensorList(weights), at::TensorList(present_or_absent));
}

}  // namespace zest
