// config.json fields of diffusers' UNet2DConditionModel (see diffusers_config.h).
#include "models/unet/diffusers_config.h"

#include "core/check.h"
#include "formats/json_field.h"

#include <algorithm>

namespace zest::unet {
namespace {

// UNet2DConditionModel.__init__'s arguments whose default is None (or False, which None equals where
// diffusers only tests truth), so a JSON null builds the same network as leaving the field out.
const std::vector<std::string> kNullMeansDefault = {
    "sample_size", "reverse_transformer_layers_per_block", "encoder_hid_dim", "encoder_hid_dim_type",
    "num_attention_heads", "class_embed_type", "addition_embed_type", "addition_time_embed_dim",
    "num_class_embeds", "time_embedding_dim", "time_embedding_act_fn", "timestep_post_act",
    "time_cond_proj_dim", "projection_class_embeddings_input_dim", "mid_block_only_cross_attention",
    "cross_attention_norm", "upcast_attention", "center_input_sample", "dual_cross_attention",
    "use_linear_projection", "resnet_skip_time_act", "class_embeddings_concat"};

// The other arguments: a value is needed (None would build another network or fail in diffusers).
const std::vector<std::string> kNeedsValue = {
    "in_channels", "out_channels", "flip_sin_to_cos", "freq_shift", "down_block_types", "mid_block_type",
    "up_block_types", "only_cross_attention", "block_out_channels", "layers_per_block", "downsample_padding",
    "mid_block_scale_factor", "dropout", "act_fn", "norm_num_groups", "norm_eps", "cross_attention_dim",
    "transformer_layers_per_block", "attention_head_dim", "resnet_time_scale_shift", "resnet_out_scale_factor",
    "time_embedding_type", "conv_in_kernel", "conv_out_kernel", "attention_type", "addition_embed_type_num_heads"};

// The diffusers release whose UNet2DConditionModel arguments zest reads (written into new configs).
constexpr const char* kDiffusersVersion = "0.30.0";

bool contains(const std::vector<std::string>& list, const std::string& key) {
  return std::find(list.begin(), list.end(), key) != list.end();
}

}  // namespace

DiffusersConfig read_diffusers_config(const nlohmann::ordered_json& config, const std::string& path) {
  const JsonField root(config, path);
  root.object();
  if (root.has("_class_name")) root.at("_class_name").one_of({kDiffusersClassName});  // what zest fine-tunes
  DiffusersConfig out;
  // The values go on as the model configuration's fields, whose types and ranges its reader checks.
  for (const auto& [key, value] : root.members()) {
    if (key.rfind('_', 0) == 0) continue;  // bookkeeping (_class_name, _diffusers_version, _name_or_path, ...)
    if (contains(kNullMeansDefault, key)) {
      if (!value.is_null()) out.architecture[key] = config.at(key);
    } else if (contains(kNeedsValue, key)) {
      if (value.is_null()) value.fail("is null; diffusers' default for it is not None, so give its value");
      out.architecture[key] = config.at(key);
    } else {
      out.notes.push_back(path + ": field '" + value.path() + "' is not an argument of diffusers' " +
                          kDiffusersClassName + "; ignored, as diffusers ignores it (kept in an exported config.json)");
    }
  }
  return out;
}

nlohmann::ordered_json diffusers_config_json(const nlohmann::ordered_json& fields) {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  out["_class_name"] = fields.value("_class_name", std::string(kDiffusersClassName));
  out["_diffusers_version"] = fields.value("_diffusers_version", std::string(kDiffusersVersion));
  for (const auto& [key, value] : fields.items()) out[key] = value;
  return out;
}

}  // namespace zest::unet
