// The UNet's convolutional pieces: the sinusoidal timestep embedding and its MLP, ResnetBlock2D, and
// the Downsample2D/Upsample2D samplers (diffusers names, shapes and arithmetic).
#pragma once

#include "models/unet/layers.h"

#include <torch/torch.h>

#include <cstdint>
#include <optional>
#include <vector>

namespace zest::unet {

// diffusers get_timestep_embedding (max period 10000, scale 1): [N] → [N, dim] float32, the sine half
// first unless flip_sin_to_cos. Computed in float32 whatever the timesteps' dtype.
torch::Tensor timestep_embedding(const torch::Tensor& timesteps, int64_t dim, bool flip_sin_to_cos,
                                 double freq_shift);

// TimestepEmbedding: linear_1 → act → linear_2 (→ optional post_act).
class TimestepEmbeddingImpl : public torch::nn::Module {
 public:
  TimestepEmbeddingImpl(int64_t in_channels, int64_t dim, Act act, std::optional<Act> post_act,
                        const torch::TensorOptions& options);
  torch::Tensor forward(const torch::Tensor& x) const;

 private:
  Linear linear_1{nullptr};
  Linear linear_2{nullptr};
  Act act_;
  std::optional<Act> post_act_;
};
TORCH_MODULE(TimestepEmbedding);

struct ResnetOptions {
  int64_t in_channels = 0;
  int64_t out_channels = 0;
  int64_t temb_channels = 0;
  int64_t groups = 32;
  double eps = 1e-5;
  Act act = Act::silu;
  double dropout = 0.0;
  double output_scale_factor = 1.0;
};

// h = conv1(act(norm1(x))) + time_emb_proj(act(temb)); h = conv2(dropout(act(norm2(h))));
// out = (shortcut(x) + h) / output_scale_factor, shortcut a 1×1 conv only when in ≠ out channels.
class ResnetBlock2DImpl : public torch::nn::Module {
 public:
  ResnetBlock2DImpl(const ResnetOptions& o, const torch::TensorOptions& options);
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& temb) const;

 private:
  ResnetOptions o_;
  GroupNorm norm1{nullptr};
  Conv2d conv1{nullptr};
  Linear time_emb_proj{nullptr};
  GroupNorm norm2{nullptr};
  Conv2d conv2{nullptr};
  Conv2d conv_shortcut{nullptr};
};
TORCH_MODULE(ResnetBlock2D);

// 3×3 stride-2 conv; padding 0 pads right/bottom by one first, as diffusers does.
class Downsample2DImpl : public torch::nn::Module {
 public:
  Downsample2DImpl(int64_t channels, int64_t padding, const torch::TensorOptions& options);
  torch::Tensor forward(const torch::Tensor& x) const;

 private:
  int64_t padding_;
  Conv2d conv{nullptr};
};
TORCH_MODULE(Downsample2D);

// Nearest ×2 (or nearest to `size`, when the input is not a multiple of the total up factor), then a
// 3×3 conv.
class Upsample2DImpl : public torch::nn::Module {
 public:
  Upsample2DImpl(int64_t channels, const torch::TensorOptions& options);
  torch::Tensor forward(const torch::Tensor& x,
                        const std::optional<std::vector<int64_t>>& size = std::nullopt) const;

 private:
  Conv2d conv{nullptr};
};
TORCH_MODULE(Upsample2D);

}  // namespace zest::unet
