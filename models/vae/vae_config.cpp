// VaeConfig from config.json (see vae_config.h).
#include "models/vae/vae_config.h"

#include "core/check.h"
#include "formats/json_text.h"

#include <cmath>

namespace zest::vae {
namespace {

// Architecture bounds, far above SD1.5's and SDXL's VAE (4 blocks of 128..512 channels, 2 layers each,
// 4 latent channels): a hostile config.json is refused by key before anything is allocated.
constexpr int64_t kMaxChannels = 16384;
constexpr int64_t kMaxLayersPerBlock = 64;
constexpr size_t kMaxBlocks = 16;

int64_t positive(const nlohmann::json& value, const char* key, const std::string& path, int64_t largest) {
  if (value.is_number_unsigned() && value.get<uint64_t>() > static_cast<uint64_t>(largest))
    ZEST_FAIL(path, ": \"", key, "\" is ", value.get<uint64_t>(), "; the largest value zest accepts is ", largest);
  if (!value.is_number_integer() || value.get<int64_t>() <= 0) {
    ZEST_FAIL(path, ": \"", key, "\" is ", json_excerpt(value), "; expected a positive integer");
  }
  return value.get<int64_t>();
}

void read_int(const nlohmann::json& config, const char* key, const std::string& path, int64_t largest, int64_t& out) {
  if (config.contains(key)) out = positive(config[key], key, path, largest);
}

void read_bool(const nlohmann::json& config, const char* key, const std::string& path, bool& out) {
  if (!config.contains(key)) return;
  if (!config[key].is_boolean()) ZEST_FAIL(path, ": \"", key, "\" is ", json_excerpt(config[key]), "; expected true or false");
  out = config[key].get<bool>();
}

void expect_block_types(const nlohmann::json& config, const char* key, const char* type, size_t count,
                        const std::string& path) {
  if (!config.contains(key)) {
    if (count != 1) ZEST_FAIL(path, ": \"", key, "\" is missing; expected ", count, " entries \"", type, "\"");
    return;
  }
  const nlohmann::json& types = config[key];
  bool ok = types.is_array() && types.size() == count;
  for (size_t i = 0; ok && i < types.size(); ++i) ok = types[i] == type;
  if (!ok) {
    ZEST_FAIL(path, ": \"", key, "\" is ", json_excerpt(types), "; expected ", count, " times \"", type,
              "\" (one per entry of block_out_channels)");
  }
}

}  // namespace

VaeConfig VaeConfig::from_json(const nlohmann::json& config, const std::string& path) {
  if (!config.is_object()) ZEST_FAIL(path, ": expected a JSON object of AutoencoderKL fields");
  if (config.contains("_class_name") && config["_class_name"] != "AutoencoderKL") {
    ZEST_FAIL(path, ": \"_class_name\" is ", json_excerpt(config["_class_name"]), "; expected \"AutoencoderKL\"");
  }
  VaeConfig out;
  read_int(config, "in_channels", path, kMaxChannels, out.in_channels);
  read_int(config, "out_channels", path, kMaxChannels, out.out_channels);
  read_int(config, "layers_per_block", path, kMaxLayersPerBlock, out.layers_per_block);
  read_int(config, "latent_channels", path, kMaxChannels, out.latent_channels);
  read_int(config, "norm_num_groups", path, kMaxChannels, out.norm_num_groups);
  if (config.contains("block_out_channels")) {
    const nlohmann::json& channels = config["block_out_channels"];
    if (!channels.is_array() || channels.empty() || channels.size() > kMaxBlocks) {
      ZEST_FAIL(path, ": \"block_out_channels\" is ", json_excerpt(channels), "; expected a list of 1 to ", kMaxBlocks,
                " positive integers");
    }
    out.block_out_channels.clear();
    for (const auto& c : channels) out.block_out_channels.push_back(positive(c, "block_out_channels", path, kMaxChannels));
  }
  for (const int64_t c : out.block_out_channels) {
    if (c % out.norm_num_groups != 0) {
      ZEST_FAIL(path, ": block_out_channels entry ", c, " is not a multiple of \"norm_num_groups\" ", out.norm_num_groups);
    }
  }
  expect_block_types(config, "down_block_types", "DownEncoderBlock2D", out.block_out_channels.size(), path);
  expect_block_types(config, "up_block_types", "UpDecoderBlock2D", out.block_out_channels.size(), path);
  if (config.contains("act_fn") && config["act_fn"] != "silu") {
    ZEST_FAIL(path, ": \"act_fn\" is ", json_excerpt(config["act_fn"]), "; expected \"silu\"");
  }
  for (const char* key : {"scaling_factor", "shift_factor"}) {
    if (!config.contains(key) || config[key].is_null()) continue;
    if (!config[key].is_number() || !std::isfinite(config[key].get<double>()))
      ZEST_FAIL(path, ": \"", key, "\" is ", json_excerpt(config[key]), "; expected a finite number");
    (std::string(key) == "scaling_factor" ? out.scaling_factor : out.shift_factor) = config[key].get<double>();
  }
  if (out.scaling_factor <= 0) ZEST_FAIL(path, ": \"scaling_factor\" is ", out.scaling_factor, "; expected > 0");
  for (const char* key : {"latents_mean", "latents_std"}) {
    if (config.contains(key) && !config[key].is_null()) {
      ZEST_FAIL(path, ": \"", key, "\" is set; zest's AutoencoderKL supports only the SD1.5 / SDXL scaling "
                "(scaling_factor and shift_factor)");
    }
  }
  read_bool(config, "force_upcast", path, out.force_upcast);
  read_bool(config, "use_quant_conv", path, out.use_quant_conv);
  read_bool(config, "use_post_quant_conv", path, out.use_post_quant_conv);
  read_bool(config, "mid_block_add_attention", path, out.mid_block_add_attention);
  return out;
}

}  // namespace zest::vae
