// Channel bookkeeping of the UNet's down/mid/up blocks (diffusers' get_down/mid/up_block).
#include "models/unet/unet_blocks.h"

#include <algorithm>

namespace zest::unet {

namespace {

ResnetBlock2D make_resnet(const UNetConfig& c, int64_t in, int64_t out, double output_scale_factor,
                          const torch::TensorOptions& options) {
  ResnetOptions o;
  o.in_channels = in;
  o.out_channels = out;
  o.temb_channels = c.time_embed_dim();
  o.groups = c.norm_num_groups;
  o.eps = c.norm_eps;
  o.act = c.act_fn;
  o.dropout = c.dropout;
  o.output_scale_factor = output_scale_factor;
  return ResnetBlock2D(o, options);
}

// The Transformer2DModel of level `level` (per-level heads, depth and context width).
Transformer2D make_attention(const UNetConfig& c, size_t level, int64_t channels,
                             const torch::TensorOptions& options) {
  Transformer2DOptions o;
  o.channels = channels;
  o.heads = c.num_heads[level];
  o.layers = c.transformer_layers_per_block[level];
  o.context_dim = c.cross_attention_dim[level];
  o.norm_groups = c.norm_num_groups;
  o.linear_projection = c.use_linear_projection;
  return Transformer2D(o, options);
}

}  // namespace

UNetBlockImpl::UNetBlockImpl(std::vector<ResnetBlock2D> resnets, std::vector<Transformer2D> attentions,
                             Downsample2D downsampler, Upsample2D upsampler)
    : resnets_(std::move(resnets)),
      attentions_(std::move(attentions)),
      downsampler_(std::move(downsampler)),
      upsampler_(std::move(upsampler)) {
  if (!attentions_.empty()) {
    auto list = register_module("attentions", torch::nn::ModuleList());
    for (const auto& a : attentions_) list->push_back(a);
  }
  auto list = register_module("resnets", torch::nn::ModuleList());
  for (const auto& r : resnets_) list->push_back(r);
  if (downsampler_) register_module("downsamplers", torch::nn::ModuleList(downsampler_));
  if (upsampler_) register_module("upsamplers", torch::nn::ModuleList(upsampler_));
}

UNetBlock make_down_block(const UNetConfig& c, size_t level, const torch::TensorOptions& options) {
  const int64_t out = c.block_out_channels[level];
  const int64_t in = level == 0 ? c.block_out_channels[0] : c.block_out_channels[level - 1];
  std::vector<ResnetBlock2D> resnets;
  std::vector<Transformer2D> attentions;
  for (int64_t j = 0; j < c.layers_per_block[level]; ++j) {
    resnets.push_back(make_resnet(c, j == 0 ? in : out, out, 1.0, options));
    if (c.down_cross_attention[level]) attentions.push_back(make_attention(c, level, out, options));
  }
  Downsample2D down{nullptr};
  if (level + 1 < c.levels()) down = Downsample2D(out, c.downsample_padding, options);
  return UNetBlock(std::move(resnets), std::move(attentions), down, nullptr);
}

UNetBlock make_mid_block(const UNetConfig& c, const torch::TensorOptions& options) {
  const size_t last = c.levels() - 1;
  const int64_t ch = c.block_out_channels[last];
  std::vector<ResnetBlock2D> resnets;
  std::vector<Transformer2D> attentions;
  resnets.push_back(make_resnet(c, ch, ch, c.mid_block_scale_factor, options));
  attentions.push_back(make_attention(c, last, ch, options));
  resnets.push_back(make_resnet(c, ch, ch, c.mid_block_scale_factor, options));
  return UNetBlock(std::move(resnets), std::move(attentions), nullptr, nullptr);
}

UNetBlock make_up_block(const UNetConfig& c, size_t up_level, const torch::TensorOptions& options) {
  const size_t n = c.levels();
  const size_t level = n - 1 - up_level;  // the down level this up block mirrors
  const int64_t out = c.block_out_channels[level];
  // The previous up block's output (the mid block's for the deepest), and the skip entering last.
  const int64_t prev = c.block_out_channels[std::min(n - up_level, n - 1)];
  const int64_t skip_in = c.block_out_channels[level == 0 ? 0 : level - 1];
  const int64_t layers = c.layers_per_block[level] + 1;
  std::vector<ResnetBlock2D> resnets;
  std::vector<Transformer2D> attentions;
  for (int64_t j = 0; j < layers; ++j) {
    const int64_t skip = j + 1 == layers ? skip_in : out;
    resnets.push_back(make_resnet(c, (j == 0 ? prev : out) + skip, out, 1.0, options));
    if (c.up_cross_attention[up_level]) attentions.push_back(make_attention(c, level, out, options));
  }
  Upsample2D up{nullptr};
  if (up_level + 1 < n) up = Upsample2D(out, options);
  return UNetBlock(std::move(resnets), std::move(attentions), nullptr, up);
}

}  // namespace zest::unet
