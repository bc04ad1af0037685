// The autograd function of split_linear (see split_linear_op.h): one product per part in forward (the last
// one through the GELU epilogue when asked for its activation); in backward dX accumulates over the parts in
// one buffer and the weight and bias gradients go into row ranges of their .grad slots (weight_grad_gemm.h),
// or are returned whole where no slots exist.
#include "kernels/linear_backward.h"
#include "kernels/split_linear_op.h"
#include "kernels/weight_grad_gemm.h"

#include <torch/csrc/autograd/custom_function.h>

namespace zest {
namespace {

struct SplitLinear : torch::autograd::Function<SplitLinear> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                                                const torch::Tensor& weight, const torch::Tensor& bias,
                                                const std::vector<int64_t>& sizes, bool gelu_of_last) {
    const auto x2 = x.reshape({-1, weight.size(1)});  // a view where x allows one
    // A part nothing used, and the GELU activation (no gradient of its own), reach backward undefined rather
    // than as zeros the size of the part: autograd would otherwise write one such tensor per call.
    ctx->set_materialize_grads(false);
    ctx->save_for_backward({x2});
    const torch::Tensor b = present(bias);
    ctx->saved_data["weight"] = weight;  // the parameters themselves: backward reads their .grad slots
    ctx->saved_data["bias"] = b;
    ctx->saved_data["sizes"] = sizes;
    ctx->saved_data["input_sizes"] = x.sizes().vec();
    torch::autograd::variable_list parts;
    torch::Tensor activated = absent_tensor(x);  // GELU of the last part, when its epilogue made it
    const ProductInput input = ProductInput::activation(x2);  // cast to fp8 once for every part, with fp8
    int64_t offset = 0;
    for (size_t i = 0; i < sizes.size(); offset += sizes[i], ++i) {
      const auto w = matrix_of(weight).narrow(0, offset, sizes[i]);
      const auto b_rows = b.defined() ? b.narrow(0, offset, sizes[i]) : b;
      auto out_sizes = x.sizes().vec();
      out_sizes.back() = sizes[i];
      const bool last = i + 1 == sizes.size();
      if (gelu_of_last && last && b.defined()) {
        if (auto product = gelu_forward_product(input, w, b_rows)) {
          parts.push_back(product->pre_activation.view(out_sizes));
          activated = product->activated.view(out_sizes);
          continue;
        }
      }
      parts.push_back(linear_forward_2d(input, w, b_rows, x.sizes()));
    }
    if (gelu_of_last) {
      parts.push_back(activated);
      ctx->mark_non_differentiable({activated});
    }
    return parts;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto x = ctx->get_saved_variables()[0].contiguous();
    const auto weight = ctx->saved_data["weight"].toTensor();
    const auto bias = optional_tensor(ctx->saved_data["bias"]);
    const auto sizes = ctx->saved_data["sizes"].toIntVector();
    const auto dtype = weight.scalar_type();
    const GradSlots slots = grad_slots_of(weight, bias);
    torch::Tensor dx, dweight, dbias;
    if (!slots.usable) {
      dweight = torch::zeros_like(weight);
      if (bias.defined()) dbias = torch::zeros_like(bias);
    }
    int64_t offset = 0;
    for (size_t i = 0; i < sizes.size(); offset += sizes[i], ++i) {
      if (!grads[i].defined()) continue;  // a part nothing used: no gradient flows through its rows
      const int64_t rows = sizes[i];
      const auto dy = grads[i].reshape({-1, rows}).to(dtype).contiguous();
      const auto w = matrix_of(weight).narrow(0, offset, rows);
      if (ctx->needs_input_grad(0)) add_to_input_grad(dx, dy, w);
      if (slots.usable) {
        accumulate_weight_grads(dy, x, matrix_of(slots.weight).narrow(0, offset, rows),
                                bias.defined() ? slots.bias.narrow(0, offset, rows) : torch::Tensor(), dtype);
      } else {
        matrix_of(dweight).narrow(0, offset, rows).copy_(torch::mm(dy.t(), x));
        if (bias.defined()) dbias.narrow(0, offset, rows).copy_(dy.sum(0));
      }
    }
    count_linear_backward(slots.usable);
    if (dx.defined()) dx = dx.view(ctx->saved_data["input_sizes"].toIntVector());
    return {dx, dweight, dbias, torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

std::vector<torch::Tensor> split_linear_cuda(const torch::Tensor& x, const torch::Tensor& weight,
                                             const torch::Tensor& bias, const std::vector<int64_t>& sizes,
                                             bool gelu_of_last) {
  auto parts = SplitLinear::apply(x, weight, bias.defined() ? bias : absent_tensor(weight), sizes, gelu_of_last);
  if (gelu_of_last) parts.back() = present(parts.back());
  return parts;
}

}  // namespace zest
