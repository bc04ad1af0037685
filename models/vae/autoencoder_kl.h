// diffusers' AutoencoderKL (the VAE of SD1.5 and SDXL) under the reference state-dict names: the encoder
// to the latent distribution's mean and log-variance, seeded sampling as latent_dist.sample(generator),
// and the decoder; scaling_factor / shift_factor between VAE latents and the UNet's.
#pragma once

#include "models/unet/layers.h"
#include "models/vae/vae_config.h"

#include <torch/torch.h>

#include <filesystem>
#include <optional>

namespace zest::vae {

// ResnetBlock2D without a time embedding: h = conv2(SiLU(norm2(conv1(SiLU(norm1(x)))))), out = shortcut(x) + h.
class VaeResnetImpl : public torch::nn::Module {
 public:
  VaeResnetImpl(int64_t in_channels, int64_t out_channels, int64_t groups, const torch::TensorOptions& options);
  torch::Tensor forward(const torch::Tensor& x) const;

  unet::GroupNorm norm1{nullptr};
  unet::Conv2d conv1{nullptr};
  unet::GroupNorm norm2{nullptr};
  unet::Conv2d conv2{nullptr};
  unet::Conv2d conv_shortcut{nullptr};  // 1×1, only when the channel count changes
};
TORCH_MODULE(VaeResnet);

// The mid block's single-head self-attention over the H·W positions (group_norm, to_q/k/v, to_out.0) with
// its residual.
class VaeAttentionImpl : public torch::nn::Module {
 public:
  VaeAttentionImpl(int64_t channels, int64_t groups, const torch::TensorOptions& options);
  torch::Tensor forward(const torch::Tensor& x) const;

  unet::GroupNorm group_norm{nullptr};
  unet::Linear to_q{nullptr}, to_k{nullptr}, to_v{nullptr};
  torch::nn::ModuleList to_out{nullptr};  // [Linear]
};
TORCH_MODULE(VaeAttention);

// UNetMidBlock2D of the VAE: resnets.0, attentions.0 (when mid_block_add_attention), resnets.1.
class VaeMidBlockImpl : public torch::nn::Module {
 public:
  VaeMidBlockImpl(const VaeConfig& config, const torch::TensorOptions& options);
  torch::Tensor forward(const torch::Tensor& x) const;

  torch::nn::ModuleList resnets{nullptr};
  torch::nn::ModuleList attentions{nullptr};
};
TORCH_MODULE(VaeMidBlock);

class VaeEncoderImpl : public torch::nn::Module {
 public:
  VaeEncoderImpl(const VaeConfig& config, const torch::TensorOptions& options);
  torch::Tensor forward(const torch::Tensor& x) const;  // [B, 2·latent, H/f, W/f]

  unet::Conv2d conv_in{nullptr};
  torch::nn::ModuleList down_blocks{nullptr};  // each: resnets.{j}, downsamplers.0.conv (not the last)
  VaeMidBlock mid_block{nullptr};
  unet::GroupNorm conv_norm_out{nullptr};
  unet::Conv2d conv_out{nullptr};
};
TORCH_MODULE(VaeEncoder);

class VaeDecoderImpl : public torch::nn::Module {
 public:
  VaeDecoderImpl(const VaeConfig& config, const torch::TensorOptions& options);
  torch::Tensor forward(const torch::Tensor& z) const;

  unet::Conv2d conv_in{nullptr};
  VaeMidBlock mid_block{nullptr};
  torch::nn::ModuleList up_blocks{nullptr};  // each: resnets.{j} (layers_per_block + 1), upsamplers.0.conv
  unet::GroupNorm conv_norm_out{nullptr};
  unet::Conv2d conv_out{nullptr};
};
TORCH_MODULE(VaeDecoder);

// DiagonalGaussianDistribution: mean and log-variance (clamped to [-30, 20]) of the encoder's output.
struct LatentDistribution {
  torch::Tensor mean;
  torch::Tensor logvar;
  torch::Tensor std() const { return torch::exp(0.5 * logvar); }
  // mean + std · N(0, 1), the noise drawn as diffusers' randn_tensor draws it: with `generator` (a CPU
  // generator draws on the CPU), in mean's dtype, then moved to mean's device.
  torch::Tensor sample(std::optional<at::Generator> generator = std::nullopt) const;
};

class AutoencoderKLImpl : public torch::nn::Module {
 public:
  explicit AutoencoderKLImpl(const VaeConfig& config, const torch::TensorOptions& options = {});

  // Images in [-1, 1], [B, in_channels, H, W] (H, W multiples of 2^(blocks-1)).
  LatentDistribution encode(const torch::Tensor& images) const;
  // VAE latents (not scaled) → images.
  torch::Tensor decode(const torch::Tensor& latents) const;

  // What the UNet trains on and what decode takes back: (z - shift_factor) · scaling_factor and its inverse.
  torch::Tensor to_unet_latents(const torch::Tensor& z) const;
  torch::Tensor from_unet_latents(const torch::Tensor& latents) const;

  const VaeConfig& config() const { return config_; }

  VaeEncoder encoder{nullptr};
  VaeDecoder decoder{nullptr};
  unet::Conv2d quant_conv{nullptr};       // 1×1 on 2·latent channels (use_quant_conv)
  unet::Conv2d post_quant_conv{nullptr};  // 1×1 on latent channels (use_post_quant_conv)

 private:
  VaeConfig config_;
};
TORCH_MODULE(AutoencoderKL);

// The dtype the reference runs the VAE in when asked for `requested`: float32 instead of float16 when the
// configuration says force_upcast (SDXL's VAE overflows in float16).
torch::Dtype vae_compute_dtype(const VaeConfig& config, torch::Dtype requested);

// A pipeline folder's vae/: config.json and diffusion_pytorch_model.safetensors, loaded strictly by name.
AutoencoderKL load_autoencoder_kl(const std::filesystem::path& folder, const torch::TensorOptions& options = {});

}  // namespace zest::vae
