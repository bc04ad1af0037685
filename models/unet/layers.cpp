// Parameterised primitives of the UNet port: torch.nn-default initialisation, meta-device aware.
#include "models/unet/layers.h"

#include "core/check.h"
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
  auto initial_weight = uniform({out_features, in_features}, kaiming_bound(in_features), options);  // drawn first
  register_weights(initial_weight, with_bias ? uniform({out_features}, bias_bound(in_features), options) : torch::Tensor());
}

Conv2dImpl::Conv2dImpl(int64_t in_channels, int64_t out_channels, int64_t kernel_size, int64_t stride,
                       int64_t padding, const torch::TensorOptions& options) {
  const int64_t fan_in = in_channels * kernel_size * kernel_size;
  auto initial_weight = uniform({out_channels, in_channels, kernel_size, kernel_size}, kaiming_bound(fan_in), options);
  register_weights(initial_weight, uniform({out_channels}, bias_bound(fan_in), options), stride, padding);
}

GroupNormImpl::GroupNormImpl(int64_t groups, int64_t channels, double eps,
                             const torch::TensorOptions& options)
    : groups_(groups), eps_(eps) {
  weight = register_parameter("weight", torch::ones({channels}, options));
  bias = register_parameter("bias", torch::zeros({channels}, options));
}

// GroupNorm and LayerNorm are on autocast's float32 list: statistics, affine (and the SiLU after them)
// in float32; the result is returned in x's dtype, which the next conv or Linear casts to anyway.
torch::Tensor GroupNormImpl::forward(const torch::Tensor& x, const torch::Tensor& shift) const {
  return group_norm_silu(x, groups_, weight, bias, eps_, /*silu=*/false, shift);
}

torch::Tensor GroupNormImpl::forward_silu(const torch::Tensor& x, const torch::Tensor& shift) const {
  return group_norm_silu(x, groups_, weight, bias, eps_, /*silu=*/true, shift);
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
