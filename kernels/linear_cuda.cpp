// The accumulating linear's autograd function (see linear_op.h): forward is ATen's (addmm with the bias
// in cuBLASLt's epilogue, as torch::linear runs it) or fp8's (linear_products.h); backward computes dX the
// same way and has cuBLAS
// accumulate the weight and bias gradients into their .grad slots (float32, or the weight's 16-bit dtype)
// with the products of weight_grad_gemm.h.
#include "core/check.h"
#include "kernels/linear_backward.h"
#include "kernels/linear_op.h"
#include "kernels/weight_grad_gemm.h"

#include <torch/csrc/autograd/custom_function.h>

#include <atomic>

namespace zest {
namespace {

std::atomic<int64_t> fused_backwards{0};
std::atomic<int64_t> unfused_backwards{0};

// The slot autograd would accumulate p's gradient into, or an undefined tensor: a float32 .grad, or a
// 16-bit one in p's dtype that is a view of a larger buffer (the engine's flat gradient buffer with
// engine.reduce_dtype = the compute dtype). A 16-bit .grad autograd made itself stays autograd's, so plain
// PyTorch code gets autograd's gradients.
torch::Tensor grad_slot_of(const torch::Tensor& p) {
  const torch::Tensor& g = p.grad();
  const bool is_slot = g.defined() && (g.scalar_type() == torch::kFloat32 ||
                                       (g.scalar_type() == p.scalar_type() && g.is_view()));
  const bool usable = is_slot && g.device() == p.device() && g.sizes() == p.sizes() && g.is_contiguous() &&
                      !g.requires_grad();
  return usable ? g : torch::Tensor();
}

}  // namespace

torch::Tensor optional_tensor(const c10::IValue& value) {
  return value.isTensor() ? value.toTensor() : torch::Tensor();
}

GradSlots grad_slots_of(const torch::Tensor& weight, const torch::Tensor& bias) {
  GradSlots slots{grad_slot_of(weight), bias.defined() ? grad_slot_of(bias) : torch::Tensor(), false};
  slots.usable = slots.weight.defined() && (!bias.defined() || slots.bias.defined());
  return slots;
}

void count_linear_backward(bool fused) { ++(fused ? fused_backwards : unfused_backwards); }

torch::Tensor matrix_of(const torch::Tensor& weight) {
  return weight.dim() == 2 ? weight : weight.view({weight.size(0), weight.size(1)});
}

torch::Tensor linear_forward_2d(const ProductInput& x2, const torch::Tensor& weight, const torch::Tensor& bias,
                                c10::IntArrayRef input_sizes) {
  const auto y2 = forward_product(x2, matrix_of(weight), bias);
  auto out_sizes = input_sizes.vec();
  out_sizes.back() = weight.size(0);
  return y2.view(out_sizes);
}

LinearGrads linear_backward(const torch::Tensor& grad_output, const torch::Tensor& x2, const torch::Tensor& weight,
                            const torch::Tensor& bias, bool wants_input_grad) {
  const auto dy = grad_output.reshape({-1, weight.size(0)}).to(weight.scalar_type()).contiguous();
  const auto x_c = x2.contiguous();
  LinearGrads g;
  if (wants_input_grad) g.dinput = input_grad_product(ProductInput::gradient(dy), matrix_of(weight));
  const GradSlots slots = grad_slots_of(weight, bias);
  if (slots.usable) {
    accumulate_weight_grads(dy, x_c, matrix_of(slots.weight), slots.bias, weight.scalar_type());
  } else {
    g.dweight = torch::mm(dy.t(), x_c).view(weight.sizes());
    if (bias.defined()) g.dbias = dy.sum(0);
  }
  count_linear_backward(slots.usable);
  return g;
}

void add_to_input_grad(torch::Tensor& dx, const torch::Tensor& dy, const torch::Tensor& weight) {
  const ProductInput dy_input = ProductInput::gradient(dy);
  if (dx.defined()) {
    add_input_grad_product(dx, dy_input, weight);
  } else {
    dx = input_grad_product(dy_input, weight);
  }
}

void save_for_linear_backward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x2,
                              const torch::Tensor& weight, const torch::Tensor& bias, c10::IntArrayRef input_sizes) {
  ctx->save_for_backward({x2});
  ctx->saved_data["weight"] = weight;
  ctx->saved_data["bias"] = bias;
  ctx->saved_data["input_sizes"] = input_sizes.vec();
}

LinearGrads saved_linear_backward(torch::autograd::AutogradContext* ctx, const torch::Tensor& grad_output) {
  const auto x2 = ctx->get_saved_variables()[0];
  const auto weight = ctx->saved_data["weight"].toTensor();
  const auto bias = optional_tensor(ctx->saved_data["bias"]);
  LinearGrads g = linear_backward(grad_output, x2, weight, bias, ctx->needs_input_grad(0));
  if (g.dinput.defined()) g.dinput = g.dinput.view(ctx->saved_data["input_sizes"].toIntVector());
  return g;
}

namespace {

struct AccumulatingLinear : torch::autograd::Function<AccumulatingLinear> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& weight, const torch::Tensor& bias) {
    const auto x2 = x.reshape({-1, weight.size(1)});  // a view where x allows one (as torch::linear folds)
    const torch::Tensor b = present(bias);
    save_for_linear_backward(ctx, x2, weight, b, x.sizes());
    return linear_forward_2d(ProductInput::activation(x2), weight, b, x.sizes());
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const LinearGrads g = saved_linear_backward(ctx, grads[0]);
    return {g.dinput, g.dweight, g.dbias};
  }
};

}  // namespace

torch::Tensor accumulating_linear_cuda(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  return AccumulatingLinear::apply(x, weight, bias.defined() ? bias : absent_tensor(weight));
}

LinearGradFusionCounts accumulating_linear_counts() { return {fused_backwards.load(), unfused_backwards.load()}; }

}  // namespace zest
