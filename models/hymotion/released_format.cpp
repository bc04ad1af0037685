// HY-Motion's released folder layout and config.yml (see released_format.h).
#include "models/hymotion/released_format.h"

#include "core/check.h"
#include "formats/yaml_subset.h"

#include <algorithm>

namespace zest::hymotion {
namespace {

using Json = nlohmann::ordered_json;

const std::string kNetworkModule = "hymotion/network/hymotion_mmdit.HunyuanMotionMMDiT";

// HunyuanMotionMMDiT.__init__'s arguments; a null is its default only for the two whose default is None.
const std::vector<std::string> kNetworkArgs = {
    "input_dim", "feat_dim", "output_dim", "ctxt_input_dim", "vtxt_input_dim", "text_refiner_module",
    "text_refiner_cfg", "num_layers", "num_heads", "mlp_ratio", "mlp_act_type", "norm_type", "qk_norm_type",
    "qkv_bias", "dropout", "final_layer_module", "final_layer_cfg", "mask_mode", "apply_rope_to_single_branch",
    "insert_start_token", "with_long_skip_connection", "time_factor", "narrowband_length"};
const std::vector<std::string> kNullMeansDefault = {"output_dim", "mask_mode"};

bool contains(const std::vector<std::string>& list, const std::string& key) {
  return std::find(list.begin(), list.end(), key) != list.end();
}

// load_object imports "a/b/c.Class" as module a.b.c: either spelling names the same class.
std::string normalized_module(std::string name) {
  std::replace(name.begin(), name.end(), '/', '.');
  return name;
}

}  // namespace

const std::vector<std::string>& release_pipeline_tensor_names() {
  static const std::vector<std::string> names = {"null_vtxt_feat", "null_ctxt_input", "special_game_vtxt_feat",
                                                 "special_game_ctxt_feat", "mean", "std"};
  return names;
}

ReleaseConfig read_release_config(const std::string& yaml_text, const std::string& path) {
  const Json entries = read_yaml_entries(yaml_text, path, {"network_module", "network_module_args"});
  ZEST_CHECK(entries.contains("network_module") && entries["network_module"].is_string(), path,
             ": no network_module (the HY-Motion network class) in this config.yml");
  const std::string module = entries["network_module"].get<std::string>();
  ZEST_CHECK(normalized_module(module) == normalized_module(kNetworkModule), path, ": network_module is ", module,
             "; zest fine-tunes ", kNetworkModule);
  ZEST_CHECK(entries.contains("network_module_args") && entries["network_module_args"].is_object(), path,
             ": network_module_args (the network's constructor arguments) is missing or not a mapping");
  ReleaseConfig out;
  for (const auto& [key, value] : entries["network_module_args"].items()) {
    if (!contains(kNetworkArgs, key)) {
      out.notes.push_back(path + ": network_module_args." + key +
                          " is not an argument of HunyuanMotionMMDiT; ignored, as its **kwargs ignore it");
      continue;
    }
    if (value.is_null()) {
      ZEST_CHECK(contains(kNullMeansDefault, key), path, ": network_module_args.", key,
                 " is null; the network's default for it is not None, so give its value");
      continue;
    }
    out.architecture[key] = value;
  }
  return out;
}

std::string release_config_yaml(const nlohmann::ordered_json& network_args) {
  Json config = Json::object();
  config["network_module"] = kNetworkModule;
  config["network_module_args"] = network_args;
  config["train_pipeline"] = "hymotion/pipeline/motion_diffusion.MotionFlowMatching";
  Json pipeline = Json::object();
  pipeline["text_encoder_module"] = "hymotion/network/text_encoders/text_encoder.HYTextModel";
  pipeline["text_encoder_cfg"] = {{"llm_type", "qwen3"}, {"max_length_llm", 128}};
  pipeline["infer_noise_scheduler_cfg"] = {{"validation_steps", 50}};
  pipeline["test_cfg"] = {{"mean_std_dir", "stats"}, {"text_guidance_scale", 5.0}};
  pipeline["enable_ctxt_null_feat"] = true;
  pipeline["train_frames"] = 360;
  config["train_pipeline_args"] = pipeline;
  return "# Written by zest for a network it configured itself. The pipeline settings are those reported for\n"
         "# HY-Motion 1.0's release; test_cfg.mean_std_dir must name the folder holding Mean.npy and Std.npy.\n" +
         write_yaml(config);
}

}  // namespace zest::hymotion
