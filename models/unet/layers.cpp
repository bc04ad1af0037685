// Parameterised primitives of the UNet port: torch.nn-default initialisation, meta-device aware.
#include "models/unet/layers.h"

#include "core/check.h"
#include "models/common/conv_op.h"
#include "models/common/fused_norms.h"

#include <cmath>

namespace zest::unet {

torch::Tensor activate(Act act, const torch::Tensor& x) {
  switch (act) {
    case Act::silu:
      return torch::silu(x);
    case Act::mish:
      return torch::mish(x);
    case Act::gelu:
      return torch::gelu(x);
    case Act::relu:
      return torch::relu(x);
  }
  return x;  // unreachable: every enumerator is handled above
}

namespace {

// U(-bound, bound) draw on the global generator, skipped on the meta device (nothing to fill).
torch::Tensor uniform(std::vector<int64_t> shape, double bound, const torch::TensorOptions& options) {
  auto t = torch::empty(shape, options);
  if (!options.device().is_meta()) t.uniform_(-bound, bound);
  return t;
}

// The bounds torch.nn computes, in the same double arithmetic so the float-cast bound is identical:
// kaiming_uniform_(a=√5) → √3 · gain/√fan_in with gain = √(2/(1+a²)); bias → 1/√fan_in.
double kaiming_bound(int64_t fan_in) {
  const double slope = std::sqrt(5.0);
  const double gain = std::sqrt(2.0 / (1.0 + slope * slope));
  return std::sqrt(3.0) * (gain / std::sqrt(static_cast<double>(fan_in)));
}
double bias_bound(int64_t fan_in) { return 1.0 / std::sqrt(static_cast<double>(fan_in)); }

}  // namespace

LinearImpl::LinearImpl(int64_t in_features, int64_t out_features, bool with_bias,
                       const torch::TensorOptions& options) {
  weight = register_parameter("weight",
                              uniform({out_features, in_features}, kaiming_bound(in_features), options));
  if (with_bias) {
    bias = register_parameter("bias", uniform({out_features}, bias_bound(in_features), options));
  }
}

Conv2dImpl::Conv2dImpl(int64_t in_channels, int64_t out_channels, int64_t kernel_size, int64_t stride,
                       int64_t padding, const torch::TensorOptions& options)
    : stride_(stride), padding_(padding) {
  const int64_t fan_in = in_channels * kernel_size * kernel_size;
  weight = register_parameter(
      "weight",
      uniform({out_channels, in_channels, kernel_size, kernel_size}, kaiming_bound(fan_in), options));
  bias = register_parameter("bias", uniform({out_channels}, bias_bound(fan_in), options));
}

torch::Tensor Conv2dImpl::forward(const torch::Tensor& x) const { return convolve(x, bias); }

torch::Tensor Conv2dImpl::forward_without_bias(const torch::Tensor& x) const { return convolve(x, {}); }

// A 1×1 convolution over channels-last activations is one product over their [pixels, in] rows, which
// zest::linear runs where it accumulates (linear_op.h): the bias is added in the product's epilogue and
// cuBLAS accumulates the weight and bias gradients into the .grad slots, where the convolution adds its
// bias in a pass of its own and autograd adds its weight gradient into the slot in another.
torch::Tensor Conv2dImpl::convolve(const torch::Tensor& x, const torch::Tensor& b) const {
  const auto input = x.to(weight.scalar_type());
  const bool pointwise = weight.size(2) == 1 && weight.size(3) == 1 && stride_ == 1 && padding_ == 0 &&
                         input.dim() == 4 && input.is_contiguous(at::MemoryFormat::ChannelsLast);
  if (pointwise) {
    const auto rows = input.permute({0, 2, 3, 1});  // [B, H, W, in]: contiguous
    if (uses_accumulating_linear(rows, weight, b)) return linear(rows, weight, b).permute({0, 3, 1, 2});
  }
  return zest::conv2d(input, weight, b, stride_, padding_);  // conv_op.h: gradients into the slots on CUDA
}

GroupNormImpl::GroupNormImpl(int64_t groups, int64_t channels, double eps,
                             const torch::TensorOptions& options)
    : groups_(groups), eps_(eps) {
  weight = register_parameter("weight", torch::ones({channels}, options));
  bias = register_parameter("bias", torch::zeros({channels}, options));
}

// GroupNorm and LayerNorm are on autocast's float32 list: statistics, affine (and the SiLU after them)
// in float32; the result is returned in x's dtype, which the next conv or Linear casts to anyway.
torch::Tensor GroupNormImpl::forward(const torch::Tensor& x) const {
  return group_norm_silu(x, groups_, weight, bias, eps_, /*silu=*/false);
}

torch::Tensor GroupNormImpl::forward_silu(const torch::Tensor& x) const {
  return group_norm_silu(x, groups_, weight, bias, eps_, /*silu=*/true);
}

LayerNormImpl::LayerNormImpl(int64_t dim, double eps, const torch::TensorOptions& options)
    : dim_(dim), eps_(eps) {
  weight = register_parameter("weight", torch::ones({dim}, options));
  bias = register_parameter("bias", torch::zeros({dim}, options));
}

torch::Tensor LayerNormImpl::forward(const torch::Tensor& x) const {
  ZEST_CHECK(x.size(-1) == dim_, "LayerNorm over ", dim_, " features got ", x.sizes());
  return layer_norm_affine(x, weight, bias, eps_);
}

}  // namespace zest::unet
