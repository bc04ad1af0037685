// diffusers' AutoencoderKL configuration as read from a pipeline folder's vae/config.json: the fields that
// shape the network (DownEncoderBlock2D / UpDecoderBlock2D stacks) and the latent scaling.
#pragma once

#include "formats/json_field.h"

#include <cstdint>
#include <string>
#include <vector>

namespace zest::vae {

struct VaeConfig {
  int64_t in_channels = 3;
  int64_t out_channels = 3;
  std::vector<int64_t> block_out_channels = {64};
  int64_t layers_per_block = 1;
  int64_t latent_channels = 4;
  int64_t norm_num_groups = 32;
  double scaling_factor = 0.18215;  // SD1.5; SDXL's says 0.13025
  double shift_factor = 0.0;        // null in SD1.5 and SDXL
  bool force_upcast = true;         // SDXL's VAE overflows in float16: run it in float32
  bool use_quant_conv = true;
  bool use_post_quant_conv = true;
  bool mid_block_add_attention = true;

  // Reads a config.json object; errors name the file and the field (formats/json_field.h). Only the block
  // types, activation and options SD1.5 and SDXL use are accepted (others would build another network).
  static VaeConfig from_json(const JsonField& config);
  static VaeConfig from_json(const nlohmann::json& config, const std::string& path) {
    return from_json(JsonField(config, path));
  }
  static VaeConfig from_json(const nlohmann::ordered_json& config, const std::string& path) {
    return from_json(JsonField(config, path));
  }
};

}  // namespace zest::vae
