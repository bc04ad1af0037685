// The accumulating convolution's autograd function (see conv_op.h): forward convolves with a channels-last
// copy of the weight made by conv_weight_layout's kernel and keeps it; backward is ATen's convolution
// backward with that copy, then the weight gradient is added into the .grad slot by the layout kernel and the
// bias gradient by an add, or both are returned where no slots exist.
#include "kernels/conv_op.h"
#include "kernels/conv_weight_layout.h"
#include "kernels/kernel_tensors.h"
#include "kernels/linear_backward.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

namespace zest {
namespace {

ConvWeightShape shape_of(const torch::Tensor& weight) {
  return {weight.size(0), weight.size(1), weight.size(2) * weight.size(3)};
}

torch::Tensor channels_last_copy(const torch::Tensor& weight) {
  auto copy = torch::empty_like(weight, at::MemoryFormat::ChannelsLast);
  launch_conv_weight_to_channels_last(shape_of(weight), kernel_dtype_of(weight.scalar_type()), weight.data_ptr(),
                                      copy.data_ptr(), current_stream_of(weight));
  return copy;
}

struct AccumulatingConv : torch::autograd::Function<AccumulatingConv> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& weight, const torch::Tensor& bias, int64_t stride,
                               int64_t padding) {
    const auto weight_cl = channels_last_copy(weight);
    const torch::Tensor b = present(bias);
    ctx->save_for_backward({x, weight_cl});
    ctx->saved_data["weight"] = weight;  // the parameters themselves: backward reads their .grad slots
    ctx->saved_data["bias"] = b;
    ctx->saved_data["stride"] = stride;
    ctx->saved_data["padding"] = padding;
    return at::convolution(x, weight_cl, b, {stride, stride}, {padding, padding}, {1, 1}, false, {0, 0}, 1);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto& x = saved[0];
    const auto& weight_cl = saved[1];
    const auto weight = ctx->saved_data["weight"].toTensor();
    const auto bias = optional_tensor(ctx->saved_data["bias"]);
    const int64_t stride = ctx->saved_data["stride"].toInt(), padding = ctx->saved_data["padding"].toInt();
    const auto dy = grads[0].to(weight.scalar_type()).contiguous(at::MemoryFormat::ChannelsLast);
    const std::vector<int64_t> bias_sizes{weight.size(0)};
    auto [dx, dweight, dbias] = at::convolution_backward(
        dy, x, weight_cl, bias.defined() ? c10::OptionalIntArrayRef(bias_sizes) : c10::nullopt, {stride, stride},
        {padding, padding}, {1, 1}, false, {0, 0}, 1, {ctx->needs_input_grad(0), true, bias.defined()});
    const GradSlots slots = grad_slots_of(weight, bias);
    if (slots.usable) {
      const auto grad = dweight.contiguous(at::MemoryFormat::ChannelsLast);
      launch_conv_weight_grad_accumulate(shape_of(weight), kernel_dtype_of(grad.scalar_type()), grad.data_ptr(),
                                         kernel_dtype_of(slots.weight.scalar_type()), slots.weight.data_ptr(),
                                         current_stream_of(grad));
      if (bias.defined()) slots.bias.add_(dbias);
      dweight = torch::Tensor();
      dbias = torch::Tensor();
    }
    count_linear_backward(slots.usable);
    return {dx, dweight, dbias, torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

bool conv_weight_kernels_take(const torch::Tensor& weight) {
  return conv_weight_layout_supports(shape_of(weight));
}

torch::Tensor accumulating_conv2d_cuda(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                                       int64_t stride, int64_t padding) {
  return AccumulatingConv::apply(x, weight, bias.defined() ? bias : absent_tensor(weight), stride, padding);
}

}  // namespace zest
