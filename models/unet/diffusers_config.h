// diffusers' UNet folder format on the configuration side: which config.json fields are
// UNet2DConditionModel's constructor arguments (read as diffusers reads them, None = the default), which
// are bookkeeping, and the config.json written for a UNet zest configured itself.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace zest::unet {

inline constexpr const char* kDiffusersConfigName = "config.json";
inline constexpr const char* kDiffusersWeightsName = "diffusion_pytorch_model.safetensors";
inline constexpr const char* kDiffusersClassName = "UNet2DConditionModel";

struct DiffusersConfig {
  // The constructor arguments, in file order, without nulls (diffusers' None = zest's absent key) and
  // without bookkeeping fields ("_class_name", ...): the model configuration zest builds from.
  nlohmann::ordered_json architecture = nlohmann::ordered_json::object();
  // Fields that are not constructor arguments: reported, and ignored as diffusers ignores them.
  std::vector<std::string> notes;
};

// Reads a config.json object. A "_class_name" other than UNet2DConditionModel, or a null where diffusers'
// default is not None (so null would build a different network), is an error naming `path` and the field.
DiffusersConfig read_diffusers_config(const nlohmann::ordered_json& config, const std::string& path);

// config.json for a UNet whose configuration zest holds (diffusers' field names, e.g. a built-in
// configuration): the fields plus "_class_name" and "_diffusers_version" when they are missing.
nlohmann::ordered_json diffusers_config_json(const nlohmann::ordered_json& fields);

}  // namespace zest::unet
