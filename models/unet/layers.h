// The UNet port's parameterised primitives (Linear, Conv2d, GroupNorm, LayerNorm) and activations.
// They initialise exactly like torch.nn's defaults and can be built on the meta device (no memory).
// Mixed precision as diffusers runs under autocast (docs/models.md 5): Linear and Conv2d cast their input
// to the weights' dtype (the compute dtype); the norms compute in float32 and return float32.
#pragma once

#include "models/common/conv_layer.h"
#include "models/common/linear_layer.h"

#include <torch/torch.h>

#include <cstdint>
#include <string>

namespace zest::unet {

// diffusers' get_activation: "silu"/"swish" → SiLU, "mish", "gelu" (exact erf), "relu".
enum class Act { silu, mish, gelu, relu };
torch::Tensor activate(Act act, const torch::Tensor& x);

// Parameters are created with `options` (device, dtype). torch.nn initialises weight and bias of
// Linear/Conv2d uniformly in ±1/√fan_in (kaiming_uniform_(a=√5) for the weight), drawing from the
// global CPU generator weight first, then bias, in construction order; norms start at 1/0. On the
// meta device nothing is drawn, so counting SDXL's parameters allocates nothing. How the product or the
// convolution runs (and a LoRA adapter) is the seam's (models/common/linear_layer.h, conv_layer.h).
class LinearImpl : public LinearLayer {
 public:
  LinearImpl(int64_t in_features, int64_t out_features, bool with_bias,
             const torch::TensorOptions& options);
};
TORCH_MODULE(Linear);

class Conv2dImpl : public ConvLayer {
 public:
  Conv2dImpl(int64_t in_channels, int64_t out_channels, int64_t kernel_size, int64_t stride,
             int64_t padding, const torch::TensorOptions& options);
};
TORCH_MODULE(Conv2d);

// Affine GroupNorm over [B, C, ...] with `groups` groups; float32 result whatever the input dtype.
class GroupNormImpl : public torch::nn::Module {
 public:
  GroupNormImpl(int64_t groups, int64_t channels, double eps, const torch::TensorOptions& options);
  // Computed in float32 (autocast's rule), returned in x's dtype: the conv or Linear after it casts
  // anyway, and backward keeps only x (models/common/fused_norms.h). With `shift` [B, C]: the norm of x + shift
  // at every pixel, the sum never written on the GPU kernels.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& shift = {}) const;
  // SiLU(GroupNorm(x [+ shift])) the same way (the SiLU in float32 too).
  torch::Tensor forward_silu(const torch::Tensor& x, const torch::Tensor& shift = {}) const;

  torch::Tensor weight;  // [C]
  torch::Tensor bias;    // [C]

 private:
  int64_t groups_;
  double eps_;
};
TORCH_MODULE(GroupNorm);

// Affine LayerNorm over the last axis; float32 result whatever the input dtype.
class LayerNormImpl : public torch::nn::Module {
 public:
  LayerNormImpl(int64_t dim, double eps, const torch::TensorOptions& options);
  torch::Tensor forward(const torch::Tensor& x) const;

  torch::Tensor weight;  // [dim]
  torch::Tensor bias;    // [dim]

 private:
  int64_t dim_;
  double eps_;
};
TORCH_MODULE(LayerNorm);

}  // namespace zest::unet
