// VaeConfig from config.json (see vae_config.h).
#include "models/vae/vae_config.h"

#include "core/check.h"

#include <cmath>

namespace zest::vae {
namespace {

// Architecture bounds, far above SD1.5's and SDXL's VAE (4 blocks of 128..512 channels, 2 layers each,
// 4 latent channels): a hostile config.json is refused by key before anything is allocated.
constexpr int64_t kMaxChannels = 16384;
constexpr int64_t kMaxLayersPerBlock = 64;
constexpr size_t kMaxBlocks = 16;

void read_int(const JsonField& config, const char* key, int64_t largest, int64_t& out) {
  out = config.at(key).integer_or(out, 1, largest);
}

// `count` times `type` (one per entry of block_out_channels); absent: right for one block.
void expect_block_types(const JsonField& config, const char* key, const char* type, size_t count) {
  const JsonField types = config.at(key);
  if (!types.exists() && count == 1) return;
  bool ok = types.is_array() && types.size() == count;
  if (ok)
    for (const JsonField& t : types.items()) ok = ok && t.is_string() && t.string() == type;
  if (!ok) types.expected(str("an array of ", count, " times \"", type, "\" (one per entry of block_out_channels)"));
}

}  // namespace

VaeConfig VaeConfig::from_json(const JsonField& config) {
  config.object();
  if (config.has("_class_name")) config.at("_class_name").one_of({"AutoencoderKL"});
  VaeConfig out;
  read_int(config, "in_channels", kMaxChannels, out.in_channels);
  read_int(config, "out_channels", kMaxChannels, out.out_channels);
  read_int(config, "layers_per_block", kMaxLayersPerBlock, out.layers_per_block);
  read_int(config, "latent_channels", kMaxChannels, out.latent_channels);
  read_int(config, "norm_num_groups", kMaxChannels, out.norm_num_groups);
  const JsonField channels = config.at("block_out_channels");
  if (channels.exists()) {
    if (!channels.is_array() || channels.size() == 0 || channels.size() > kMaxBlocks)
      channels.expected(str("an array of 1 to ", kMaxBlocks, " integers in [1, ", kMaxChannels, "]"));
    out.block_out_channels = channels.integers(1, kMaxChannels);
  }
  for (const int64_t c : out.block_out_channels) {
    if (c % out.norm_num_groups != 0)
      channels.fail(str("holds ", c, ", which is not a multiple of norm_num_groups (", out.norm_num_groups, ")"));
  }
  expect_block_types(config, "down_block_types", "DownEncoderBlock2D", out.block_out_channels.size());
  expect_block_types(config, "up_block_types", "UpDecoderBlock2D", out.block_out_channels.size());
  if (config.has("act_fn")) config.at("act_fn").one_of({"silu"});
  // null in SD1.5's and SDXL's files: the default.
  out.scaling_factor = config.at("scaling_factor").null_as_absent().number_or(out.scaling_factor, NumberRange::positive());
  out.shift_factor = config.at("shift_factor").null_as_absent().number_or(out.shift_factor);
  for (const char* key : {"latents_mean", "latents_std"}) {
    if (config.at(key).null_as_absent().exists()) {
      config.at(key).fail("is set; zest's AutoencoderKL supports only the SD1.5 / SDXL scaling (scaling_factor and "
                          "shift_factor)");
    }
  }
  out.force_upcast = config.at("force_upcast").boolean_or(out.force_upcast);
  out.use_quant_conv = config.at("use_quant_conv").boolean_or(out.use_quant_conv);
  out.use_post_quant_conv = config.at("use_post_quant_conv").boolean_or(out.use_post_quant_conv);
  out.mid_block_add_attention = config.at("mid_block_add_attention").boolean_or(out.mid_block_add_attention);
  return out;
}

}  // namespace zest::vae
