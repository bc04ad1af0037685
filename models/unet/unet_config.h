// UNetConfig: diffusers' UNet2DConditionModel constructor arguments (its config.json field names),
// read from a TOML table; every per-level field is resolved to one value per down block.
#pragma once

#include "core/config_reader.h"
#include "models/unet/layers.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace zest::unet {

// Supported subset (everything SD1.5 and SDXL use): {CrossAttn,}DownBlock2D / {CrossAttn,}UpBlock2D,
// UNetMidBlock2DCrossAttn, the "positional" time embedding, optional SDXL "text_time" add embedding.
// Anything else diffusers accepts is refused with an error naming the key.
struct UNetConfig {
  int64_t in_channels = 4;
  int64_t out_channels = 4;
  std::vector<int64_t> block_out_channels{320, 640, 1280, 1280};
  std::vector<bool> down_cross_attention;  // per level: CrossAttnDownBlock2D (true) or DownBlock2D
  std::vector<bool> up_cross_attention;    // per up level, deepest first: CrossAttnUpBlock2D or UpBlock2D
  std::vector<int64_t> layers_per_block;              // per level
  std::vector<int64_t> transformer_layers_per_block;  // per level
  // Heads per level. diffusers calls this attention_head_dim but uses it as the number of heads.
  std::vector<int64_t> num_heads;
  std::vector<int64_t> cross_attention_dim;  // per level
  bool use_linear_projection = false;        // Linear (SDXL) instead of 1×1 conv (SD1.5) proj_in/out

  int64_t norm_num_groups = 32;
  double norm_eps = 1e-5;  // ResNet and output GroupNorms only (spec 2.6)
  Act act_fn = Act::silu;
  double dropout = 0.0;  // inside ResNet blocks, as diffusers
  int64_t downsample_padding = 1;
  double mid_block_scale_factor = 1.0;
  int64_t conv_in_kernel = 3;
  int64_t conv_out_kernel = 3;
  bool center_input_sample = false;

  bool flip_sin_to_cos = true;
  double freq_shift = 0.0;
  int64_t time_embedding_dim = 0;  // 0: 4 · block_out_channels[0]
  std::optional<Act> timestep_post_act;
  std::optional<Act> time_embedding_act_fn;

  bool text_time_embedding = false;  // addition_embed_type = "text_time" (SDXL)
  int64_t addition_time_embed_dim = 0;
  int64_t projection_class_embeddings_input_dim = 0;

  size_t levels() const { return block_out_channels.size(); }
  int64_t time_embed_dim() const {
    return time_embedding_dim > 0 ? time_embedding_dim : 4 * block_out_channels.at(0);
  }

  // Reads every diffusers field (unknown keys are errors); unsupported values are errors naming the
  // key and what is supported; then validate().
  static UNetConfig from_toml(ConfigTable& table);
  // Structural checks (list lengths, divisibility); throws naming the field.
  void validate() const;
};

}  // namespace zest::unet
