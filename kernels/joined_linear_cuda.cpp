// The autograd function of joined_gelu_linear (see joined_linear_op.h): forward runs GELU over right (unless
// handed it) and two products over W's column blocks; backward takes each input's gradient from its own
// block of W (right's through the GELU-backward epilogue where cuBLASLt has one) and accumulates each
// block's weight gradient into the matching columns of the .grad slot.
#include "kernels/gelu_epilogue_gemm.h"
#include "kernels/joined_linear_op.h"
#include "kernels/linear_backward.h"
#include "kernels/weight_grad_gemm.h"

#include <ATen/ATen.h>
#include <ATen/record_function.h>
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
    auto y = b.defined() ? torch::addmm(b, left2, w.narrow(1, 0, left_width).t())
                         : torch::mm(left2, w.narrow(1, 0, left_width).t());
    {
      // beta = 1: into y, no temporary. Named for the profiler and the FLOP counter (profiling/flop_counter.cpp),
      // which counts this name once and not ATen's in-place addmm_ (seen twice on CUDA).
      const auto w_right_t = w.narrow(1, left_width, right_width).t();
      RECORD_FUNCTION("zest::mm_accumulate", std::vector<c10::IValue>({activated, w_right_t}));
      y.addmm_(activated, w_right_t);
    }
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
    if (ctx->needs_input_grad(0)) dleft = torch::mm(dy, w.narrow(1, 0, left_width)).view(left.sizes());
    if (ctx->needs_input_grad(1)) {
      const auto w_right = w.narrow(1, left_width, right_width);
      if (auto dh = gelu_backward_of_product(dy, w_right, right.reshape({-1, right_width}))) {
        dright = dh->view(right.sizes());
      } else {
        dright = at::gelu_backward(torch::mm(dy, w_right).view(right.sizes()), right, "tanh");
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
