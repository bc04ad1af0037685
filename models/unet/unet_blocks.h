// The UNet's down/mid/up blocks as containers: each owns and names its resnets, attentions and
// sampler. The model runs them piece by piece (one engine unit per resnet or attention), so a block
// has no forward of its own.
#pragma once

#include "models/unet/resnet.h"
#include "models/unet/transformer_2d.h"
#include "models/unet/unet_config.h"

#include <torch/torch.h>

#include <vector>

namespace zest::unet {

class UNetBlockImpl : public torch::nn::Module {
 public:
  // Parts already constructed (in diffusers' construction order, which fixes the random draws);
  // registered as attentions, resnets, then downsamplers/upsamplers: diffusers' state-dict order.
  UNetBlockImpl(std::vector<ResnetBlock2D> resnets, std::vector<Transformer2D> attentions,
                Downsample2D downsampler, Upsample2D upsampler);

  const std::vector<ResnetBlock2D>& resnets() const { return resnets_; }
  // Empty for DownBlock2D/UpBlock2D; else attentions()[j] follows resnets()[j] (mid: resnets()[j+1]).
  const std::vector<Transformer2D>& attentions() const { return attentions_; }
  const Downsample2D& downsampler() const { return downsampler_; }  // null when absent
  const Upsample2D& upsampler() const { return upsampler_; }        // null when absent

 private:
  std::vector<ResnetBlock2D> resnets_;
  std::vector<Transformer2D> attentions_;
  Downsample2D downsampler_{nullptr};
  Upsample2D upsampler_{nullptr};
};
TORCH_MODULE(UNetBlock);

// down_blocks.{level}: CrossAttnDownBlock2D or DownBlock2D, with a downsampler except at the last level.
UNetBlock make_down_block(const UNetConfig& config, size_t level, const torch::TensorOptions& options);
// mid_block: UNetMidBlock2DCrossAttn (resnet, attention, resnet).
UNetBlock make_mid_block(const UNetConfig& config, const torch::TensorOptions& options);
// up_blocks.{up_level} (0 = deepest): CrossAttnUpBlock2D or UpBlock2D with layers_per_block + 1
// resnets, with an upsampler except at the last up level.
UNetBlock make_up_block(const UNetConfig& config, size_t up_level, const torch::TensorOptions& options);

}  // namespace zest::unet
