// The UNet's activation profile (see unet_activations.h). Counts follow resnet.cpp and transformer_2d.cpp:
// a norm keeps its input, a convolution or Linear its input, GEGLU its projection and gated product,
// attention on the math path its probabilities (see ActivationShapes), in the compute dtype.
#include "models/unet/unet_activations.h"

#include <algorithm>
#include <string>

namespace zest::unet {
namespace {

struct Sizes {
  double c = 2;  // compute dtype bytes
  double f = 4;  // float32
  bool keeps_probabilities = true;
  double text_tokens = 77;
};

struct Resolution {
  int64_t height = 0, width = 0;
  double pixels() const { return static_cast<double>(height) * static_cast<double>(width); }
  Resolution down() const { return {(height + 1) / 2, (width + 1) / 2}; }  // 3×3, stride 2, padding 1
};

// ResnetBlock2D: norm1 keeps the input, conv1 the activated norm, norm2 the sum with the time
// embedding, conv2 its activated norm (the shortcut convolution reuses the input).
double resnet_bytes(const Sizes& s, double in, double out, double pixels) {
  return 2 * (in + out) * pixels * s.c;
}

// Attention of `queries` tokens over `keys`: the scaled q, k and v, the probabilities (math path) or
// the output and a row statistic (fused kernels).
double attention_bytes(const Sizes& s, double channels, double heads, double queries, double keys) {
  const double qkv = (queries + 2 * keys) * channels * s.c;
  if (!s.keeps_probabilities) return qkv + queries * channels * s.c + heads * queries * s.f;
  return qkv + heads * queries * keys * s.f;
}

// Transformer2D: the group norm's input and output, the projections in and out, and per
// BasicTransformerBlock three LayerNorms (input and output each), the two attentions with their output
// projections' inputs, the residual sums, and the GEGLU feed-forward (projection 8C, gate 4C, product 4C).
double transformer_bytes(const Sizes& s, const UNetConfig& config, size_t level, double channels, double pixels) {
  const double rows = channels * pixels * s.c;
  const double heads = static_cast<double>(config.num_heads[level]);
  // Per block: norm inputs and outputs (6), the attentions' outputs into to_out (2), feed-forward (16).
  double block = 24 * rows + attention_bytes(s, channels, heads, pixels, pixels);
  // Cross-attention: the scaled queries (the fused kernels: queries and output), k and v of the text.
  block += s.keeps_probabilities ? rows + heads * pixels * s.text_tokens * s.f : 2 * rows + heads * pixels * s.f;
  block += 2 * s.text_tokens * channels * s.c;
  const double layers = static_cast<double>(config.transformer_layers_per_block[level]);
  return (config.use_linear_projection ? 4 : 3) * rows + layers * block;
}

}  // namespace

ActivationProfile activation_profile(const UNetConfig& config, const ActivationShapes& shapes) {
  Sizes s;
  s.c = shapes.precision == Precision::fp32 ? 4 : 2;
  s.keeps_probabilities = shapes.attention_keeps_probabilities;
  s.text_tokens = static_cast<double>(shapes.text_tokens > 0 ? shapes.text_tokens : 77);
  const int64_t side = shapes.length > 0 ? shapes.length : 64;
  const Resolution input{side, shapes.width > 0 ? shapes.width : side};
  const size_t n = config.levels();
  const auto& ch = config.block_out_channels;
  const double in_channels = static_cast<double>(config.in_channels);
  const double text_bytes = s.text_tokens * static_cast<double>(config.cross_attention_dim[0]) * s.f;

  std::vector<Resolution> at(n);
  at[0] = input;
  for (size_t l = 1; l < n; ++l) at[l] = at[l - 1].down();

  ActivationProfile profile;
  auto add = [&profile](const std::string& name, double saved, double inputs) {
    profile.units.push_back({name, saved, inputs});
  };
  // conv_in keeps the noisy latents (counted outside in float32; a copy in a narrower dtype).
  add("embed", s.c < s.f ? in_channels * input.pixels() * s.c : 0.0, 0.0);
  double largest_attention = 0;
  auto attention_unit = [&](const std::string& name, size_t level, double channels, double pixels) {
    add(name, transformer_bytes(s, config, level, channels, pixels), channels * pixels * s.c + text_bytes);
    const double heads = static_cast<double>(config.num_heads[level]);
    largest_attention = std::max(largest_attention, heads * pixels * pixels);
  };
  for (size_t l = 0; l < n; ++l) {
    const double out = static_cast<double>(ch[l]);
    const double pixels = at[l].pixels();
    const std::string prefix = "down_blocks." + std::to_string(l) + ".";
    const int64_t layers = config.layers_per_block[l];
    for (int64_t j = 0; j < layers; ++j) {
      const double in = j == 0 ? static_cast<double>(l == 0 ? ch[0] : ch[l - 1]) : out;
      add(prefix + "resnets." + std::to_string(j), resnet_bytes(s, in, out, pixels), in * pixels * s.c);
      if (config.down_cross_attention[l]) attention_unit(prefix + "attentions." + std::to_string(j), l, out, pixels);
    }
    // The downsampler (folded into the level's last unit) keeps its input.
    if (l + 1 < n) profile.units.back().saved_bytes += out * pixels * s.c;
  }
  {
    const double c = static_cast<double>(ch[n - 1]);
    const double pixels = at[n - 1].pixels();
    add("mid_block.resnets.0", resnet_bytes(s, c, c, pixels), c * pixels * s.c);
    attention_unit("mid_block.attentions.0", n - 1, c, pixels);
    add("mid_block.resnets.1", resnet_bytes(s, c, c, pixels), c * pixels * s.c);
  }
  for (size_t u = 0; u < n; ++u) {
    const size_t level = n - 1 - u;
    const double out = static_cast<double>(ch[level]);
    const double prev = static_cast<double>(ch[std::min(n - u, n - 1)]);
    const double skip_in = static_cast<double>(ch[level == 0 ? 0 : level - 1]);
    const double pixels = at[level].pixels();
    const std::string prefix = "up_blocks." + std::to_string(u) + ".";
    const int64_t layers = config.layers_per_block[level] + 1;
    for (int64_t j = 0; j < layers; ++j) {
      const double skip = j + 1 == layers ? skip_in : out;
      const double in = (j == 0 ? prev : out) + skip;  // [h | skip], concatenated inside the unit
      add(prefix + "resnets." + std::to_string(j), resnet_bytes(s, in, out, pixels), in * pixels * s.c);
      if (config.up_cross_attention[u]) attention_unit(prefix + "attentions." + std::to_string(j), level, out, pixels);
    }
    // The upsampler's convolution keeps the upsampled input (at the next level's resolution).
    if (u + 1 < n) profile.units.back().saved_bytes += out * at[level - 1].pixels() * s.c;
  }
  const double c0 = static_cast<double>(ch[0]);
  add("out", 2 * c0 * input.pixels() * s.c, c0 * input.pixels() * s.c);
  // Outside the units: the batch's latents and text, the noise, x_t, the prediction and the loss's terms
  // (float32 latents).
  profile.outside_bytes = text_bytes + 6 * in_channels * input.pixels() * s.f;
  // Backward's largest transient: the probabilities' and scores' gradients of the largest attention, or
  // the gradients through the widest resnet at full resolution.
  profile.workspace_bytes = std::max(s.keeps_probabilities ? 2 * largest_attention * s.f : 0.0,
                                     4 * c0 * input.pixels() * s.c);
  return profile;
}

}  // namespace zest::unet
