// ConvLayer (see conv_layer.h): the choice of convolution, and the adapter's place in it. Without an
// adapter, exactly the calls the UNet's Conv2d made before the seam existed.
#include "models/common/conv_layer.h"

#include "core/check.h"
#include "kernels/conv_op.h"
#include "kernels/linear_op.h"
#include "kernels/residual_linear_op.h"

namespace zest {

void ConvLayer::register_weights(torch::Tensor initial_weight, torch::Tensor initial_bias, int64_t stride,
                                 int64_t padding) {
  stride_ = stride;
  padding_ = padding;
  weight = register_parameter("weight", std::move(initial_weight));
  bias = register_parameter("bias", std::move(initial_bias));
}

torch::Tensor ConvLayer::forward(const torch::Tensor& x) const { return convolve(x, bias); }

torch::Tensor ConvLayer::forward_without_bias(const torch::Tensor& x) const { return convolve(x, {}); }

// A 1×1 convolution over channels-last activations is one product over their [pixels, in] rows, which
// zest::linear runs where it accumulates (kernels/linear_op.h): the bias is added in the product's epilogue and
// cuBLAS accumulates the weight and bias gradients into the .grad slots, where the convolution adds its
// bias in a pass of its own and autograd adds its weight gradient into the slot in another.
bool ConvLayer::is_pointwise_over(const torch::Tensor& input) const {
  return weight.size(2) == 1 && weight.size(3) == 1 && stride_ == 1 && padding_ == 0 && input.dim() == 4 &&
         input.is_contiguous(at::MemoryFormat::ChannelsLast);
}

torch::Tensor ConvLayer::forward_plus(const torch::Tensor& x, const torch::Tensor& residual) const {
  const auto input = x.to(weight.scalar_type());
  if (!adapter_ && is_pointwise_over(input)) {
    const auto rows = input.permute({0, 2, 3, 1});  // [B, H, W, in]: contiguous
    // As convolve's pointwise product; linear_plus decides whether the sum is made in it.
    if (uses_accumulating_linear(rows, weight, bias)) {
      return linear_plus(rows, weight, bias, residual.permute({0, 2, 3, 1})).permute({0, 3, 1, 2});
    }
  }
  return forward(x) + residual;
}

torch::Tensor ConvLayer::convolve(const torch::Tensor& x, const torch::Tensor& b) const {
  const auto input = x.to(weight.scalar_type());
  if (adapter_) {
    return zest::conv2d(input, weight, b, stride_, padding_) +
           adapter_->conv_delta(input, stride_, padding_, is_training());
  }
  if (is_pointwise_over(input)) {
    const auto rows = input.permute({0, 2, 3, 1});  // [B, H, W, in]: contiguous
    if (uses_accumulating_linear(rows, weight, b)) return linear(rows, weight, b).permute({0, 3, 1, 2});
  }
  return zest::conv2d(input, weight, b, stride_, padding_);  // kernels/conv_op.h: gradients into the slots on CUDA
}

void ConvLayer::attach_adapter(const LowRankShape& shape) {
  ZEST_CHECK(!adapter_, "this convolution already has a LoRA adapter");
  adapter_ = std::make_unique<LowRankAdapter>(*this, in_features(), out_features(), weight.size(2), shape,
                                              weight.options().requires_grad(false));
}

void ConvLayer::fold_adapter_into_weight() {
  ZEST_CHECK(adapter_, "fold_adapter_into_weight: this convolution has no adapter");
  torch::NoGradGuard no_grad;
  weight.copy_(weight.to(torch::kFloat32) + adapter_->weight_delta().to(weight.device()));
  adapter_->set_multiplier(0.0);  // its delta is in the weight now: the layer's output is unchanged
}

}  // namespace zest
