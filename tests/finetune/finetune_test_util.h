// Fixtures of the fine-tuning suites: tiny released-weight folders written the way their owners write
// them (a diffusers UNet folder with config.json + diffusion_pytorch_model.safetensors; a HY-Motion
// release with config.yml + a torch.save latest.ckpt holding the pipeline's state dict), and helpers to
// read a model's tensors back by name.
#pragma once

#include "common/read_text.h"
#include "formats/safetensors.h"
#include "formats/config_json.h"
#include "models/hymotion/released_format.h"
#include "formats/torch_archive.h"
#include "formats/yaml_subset.h"
#include "models/model_resolve.h"
#include "models/pretrained_load.h"
#include "models/registry.h"
#include "models/unet/diffusers_config.h"

#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>

namespace zest::testing {

using Named = std::map<std::string, torch::Tensor>;

inline ResolvedModel builtin(const std::string& name) {
  ModelSelection selection;
  selection.name = name;
  return resolve_model(selection);
}

// The model's parameters by state-dict name (detached copies, fp32).
inline Named named_tensors(const torch::nn::Module& model) {
  Named out;
  for (const auto& item : model.named_parameters()) out[item.key()] = item.value().detach().to(torch::kFloat32).clone();
  return out;
}

// unet_tiny's weights (seeded, stored as `dtype`) in diffusers' layout. config.json has what a real one
// has beyond the constructor fields: bookkeeping, JSON nulls and a field diffusers does not know.
// Returns the stored values as fp32, by name.
inline Named write_diffusers_folder(const std::string& dir, torch::Dtype dtype, int64_t seed = 11) {
  std::filesystem::create_directories(dir);
  torch::manual_seed(seed);
  const ResolvedModel resolved = builtin("unet_tiny");
  auto model = build_model(resolved);
  safetensors::NamedTensors stored;
  Named values;
  for (const auto& [name, tensor] : named_tensors(*model)) {
    stored.emplace_back(name, tensor.to(dtype));
    values[name] = tensor.to(dtype).to(torch::kFloat32);
  }
  safetensors::save_file(dir + "/" + unet::kDiffusersWeightsName, stored, {{"format", "pt"}});
  nlohmann::ordered_json config = unet::diffusers_config_json(toml_to_json(resolved.toml_text, "unet_tiny"));
  config["_name_or_path"] = "tests/tiny-unet";
  config["time_embedding_dim"] = nullptr;
  config["class_embed_type"] = nullptr;
  config["some_future_field"] = {{"kept", true}};
  std::ofstream(dir + "/" + unet::kDiffusersConfigName) << config.dump(2) << "\n";
  return values;
}

// hymotion_tiny's network (seeded) in a HY-Motion release: latest.ckpt = {"model_state_dict": network
// under "motion_transformer." + the six pipeline tensors}, config.yml in PyYAML's block style with the
// pipeline section, comments and an argument the network ignores. Returns {network values, pipeline}.
// motion_dim: the features per frame (hymotion_tiny's 12, or the released 201 for skeleton animations).
// trained: the tensors HY-Motion initialises to zero (modulations, the final layer) get small seeded values,
// as a trained release has them (behind a zero final layer LoRA's adapters would get no gradient).
inline std::pair<Named, Named> write_hymotion_release(const std::string& dir, int64_t seed = 13, int64_t motion_dim = 12,
                                                      bool trained = false) {
  std::filesystem::create_directories(dir);
  torch::manual_seed(seed);
  ResolvedModel resolved = builtin("hymotion_tiny");
  for (const std::string key : {"input_dim = ", "output_dim = "}) {
    const size_t at = resolved.toml_text.find("\n" + key + "12\n");
    if (motion_dim != 12 && at != std::string::npos)
      resolved.toml_text.replace(at, key.size() + 4, "\n" + key + std::to_string(motion_dim) + "\n");
  }
  auto model = build_model(resolved);
  if (trained) {
    torch::NoGradGuard no_grad;
    for (auto& p : model->parameters())
      if (p.numel() > 1 && p.abs().max().item<double>() == 0.0) p.normal_(0.0, 0.1);
  }
  const nlohmann::ordered_json args = toml_to_json(resolved.toml_text, "hymotion_tiny");
  Named network = named_tensors(*model), pipeline;
  pipeline["null_vtxt_feat"] = torch::randn({1, 1, args["vtxt_input_dim"].get<int64_t>()});
  pipeline["null_ctxt_input"] = torch::randn({1, 1, args["ctxt_input_dim"].get<int64_t>()});
  pipeline["special_game_vtxt_feat"] = torch::randn({1, 1, args["vtxt_input_dim"].get<int64_t>()});
  pipeline["special_game_ctxt_feat"] = torch::randn({1, 1, args["ctxt_input_dim"].get<int64_t>()});
  pipeline["mean"] = torch::randn({args["input_dim"].get<int64_t>()});
  pipeline["std"] = torch::rand({args["input_dim"].get<int64_t>()}) + 0.5;
  TorchArchiveWriter writer(dir + "/" + hymotion::kReleaseWeightsName);
  for (const auto& [name, tensor] : network) writer.add(hymotion::kReleaseNetworkPrefix + name, tensor);
  for (const auto& [name, tensor] : pipeline) writer.add(name, tensor);
  writer.finish(hymotion::kReleaseStateDictKey);
  nlohmann::ordered_json config = nlohmann::ordered_json::object();
  config["network_module"] = "hymotion/network/hymotion_mmdit.HunyuanMotionMMDiT";
  config["network_module_args"] = args;
  config["network_module_args"]["unused_by_the_network"] = 7;
  config["train_pipeline"] = "hymotion/pipeline/motion_diffusion.MotionFlowMatching";
  config["train_pipeline_args"] = {{"text_encoder_module", "hymotion/network/text_encoders/text_encoder.HYTextModel"},
                                   {"test_cfg", {{"mean_std_dir", "stats"}, {"text_guidance_scale", 5.0}}},
                                   {"losses_cfg", nlohmann::ordered_json::array({"mse", "velocity"})}};
  std::ofstream(dir + "/" + hymotion::kReleaseConfigName)
      << "# tiny HY-Motion release for tests\n" << write_yaml(config) << "output_fps: 30  # trailing\n";
  return {network, pipeline};
}

inline Named read_safetensors(const std::string& path) {
  Named out;
  for (auto& [name, tensor] : safetensors::load_file(path)) out[name] = tensor.to(torch::kFloat32);
  return out;
}

}  // namespace zest::testing
