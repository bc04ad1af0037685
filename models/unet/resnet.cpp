// The UNet's convolutional pieces: timestep embedding, ResnetBlock2D, Downsample2D, Upsample2D.
#include "models/unet/resnet.h"

#include "core/check.h"

#include <cmath>

namespace zest::unet {

torch::Tensor timestep_embedding(const torch::Tensor& timesteps, int64_t dim, bool flip_sin_to_cos,
                                 double freq_shift) {
  ZEST_CHECK(timesteps.dim() == 1, "timestep_embedding: timesteps must be 1-D, got shape ",
             timesteps.sizes());
  const int64_t half = dim / 2;
  // Same float32 operation order as diffusers, so t = 999 matches to the last bit.
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat32).device(timesteps.device());
  auto exponent = torch::arange(0, half, f32) * (-std::log(10000.0));
  exponent = exponent / (static_cast<double>(half) - freq_shift);
  auto angles = timesteps.unsqueeze(1).to(torch::kFloat32) * torch::exp(exponent).unsqueeze(0);
  auto emb = torch::cat({torch::sin(angles), torch::cos(angles)}, -1);
  if (flip_sin_to_cos) emb = torch::cat({emb.slice(1, half), emb.slice(1, 0, half)}, -1);
  if (dim % 2 == 1) emb = torch::constant_pad_nd(emb, {0, 1, 0, 0});
  return emb;
}

TimestepEmbeddingImpl::TimestepEmbeddingImpl(int64_t in_channels, int64_t dim, Act act,
                                             std::optional<Act> post_act,
                                             const torch::TensorOptions& options)
    : act_(act), post_act_(post_act) {
  linear_1 = register_module("linear_1", Linear(in_channels, dim, true, options));
  linear_2 = register_module("linear_2", Linear(dim, dim, true, options));
}

torch::Tensor TimestepEmbeddingImpl::forward(const torch::Tensor& x) const {
  auto h = linear_2->forward(activate(act_, linear_1->forward(x)));
  return post_act_ ? activate(*post_act_, h) : h;
}

ResnetBlock2DImpl::ResnetBlock2DImpl(const ResnetOptions& o, const torch::TensorOptions& options)
    : o_(o) {
  // Construction order = diffusers' (it decides the random draws); it is also the state-dict order.
  norm1 = register_module("norm1", GroupNorm(o.groups, o.in_channels, o.eps, options));
  conv1 = register_module("conv1", Conv2d(o.in_channels, o.out_channels, 3, 1, 1, options));
  time_emb_proj =
      register_module("time_emb_proj", Linear(o.temb_channels, o.out_channels, true, options));
  norm2 = register_module("norm2", GroupNorm(o.groups, o.out_channels, o.eps, options));
  conv2 = register_module("conv2", Conv2d(o.out_channels, o.out_channels, 3, 1, 1, options));
  if (o.in_channels != o.out_channels) {
    conv_shortcut =
        register_module("conv_shortcut", Conv2d(o.in_channels, o.out_channels, 1, 1, 0, options));
  }
}

torch::Tensor ResnetBlock2DImpl::forward(const torch::Tensor& x, const torch::Tensor& temb) const {
  const bool is_silu = o_.act == Act::silu;  // the fused norm + SiLU, else the norm then the activation
  auto h = conv1->forward_without_bias(is_silu ? norm1->forward_silu(x) : activate(o_.act, norm1->forward(x)));
  // conv1's bias joins the time embedding [B, C], and norm2 adds the two at every pixel as it reads h: on
  // the GPU kernels no pass writes the sum or sums its gradient over the pixels (models/common/fused_norms.h).
  const auto shift = time_emb_proj->forward(activate(o_.act, temb)) + conv1->bias;
  h = is_silu ? norm2->forward_silu(h, shift) : activate(o_.act, norm2->forward(h, shift));
  if (o_.dropout > 0.0) h = torch::dropout(h, o_.dropout, is_training());
  h = conv2->forward(h);
  // A 1×1 shortcut adds conv2's output in its own product (models/common/conv_layer.h).
  const auto out = conv_shortcut ? conv_shortcut->forward_plus(x, h) : x + h;
  return o_.output_scale_factor == 1.0 ? out : out / o_.output_scale_factor;  // SD's 1.0: no pass over it
}

Downsample2DImpl::Downsample2DImpl(int64_t channels, int64_t padding,
                                   const torch::TensorOptions& options)
    : padding_(padding) {
  conv = register_module("conv", Conv2d(channels, channels, 3, 2, padding, options));
}

torch::Tensor Downsample2DImpl::forward(const torch::Tensor& x) const {
  if (padding_ == 0) return conv->forward(torch::constant_pad_nd(x, {0, 1, 0, 1}, 0));
  return conv->forward(x);
}

Upsample2DImpl::Upsample2DImpl(int64_t channels, const torch::TensorOptions& options) {
  conv = register_module("conv", Conv2d(channels, channels, 3, 1, 1, options));
}

torch::Tensor Upsample2DImpl::forward(const torch::Tensor& x,
                                      const std::optional<std::vector<int64_t>>& size) const {
  namespace F = torch::nn::functional;
  auto opts = F::InterpolateFuncOptions().mode(torch::kNearest);
  if (size) {
    opts.size(*size);
  } else {
    opts.scale_factor(std::vector<double>{2.0, 2.0});
  }
  return conv->forward(F::interpolate(x, opts));
}

}  // namespace zest::unet
