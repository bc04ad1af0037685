// HY-Motion's released model folder as its own loading code reads it (hymotion/utils/t2m_runtime.py,
// hymotion/pipeline/motion_diffusion.py): config.yml gives network_module + network_module_args (the
// HunyuanMotionMMDiT constructor arguments) and the pipeline; latest.ckpt is a torch.save dict whose
// "model_state_dict" holds the whole MotionFlowMatching pipeline: the network under "motion_transformer."
// plus six pipeline tensors, loaded with strict=False.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace zest::hymotion {

inline constexpr const char* kReleaseConfigName = "config.yml";
inline constexpr const char* kReleaseWeightsName = "latest.ckpt";
inline constexpr const char* kReleaseStateDictKey = "model_state_dict";
inline constexpr const char* kReleaseNetworkPrefix = "motion_transformer.";

// The pipeline's own tensors (learned null/special text features, motion mean/std), which are not the
// network's: not trained by zest, carried through from a released folder to an export unchanged.
const std::vector<std::string>& release_pipeline_tensor_names();

struct ReleaseConfig {
  // network_module_args in file order without nulls (None = the constructor default) and without
  // arguments HunyuanMotionMMDiT does not take: the model configuration zest builds from.
  nlohmann::ordered_json architecture = nlohmann::ordered_json::object();
  // Arguments the constructor does not take (it swallows them in **kwargs): reported, ignored.
  std::vector<std::string> notes;
};

// Reads config.yml's network_module (must be HunyuanMotionMMDiT) and network_module_args; errors name
// `path` and the line or field.
ReleaseConfig read_release_config(const std::string& yaml_text, const std::string& path);

// config.yml for a network zest configured itself (no released config to carry through): the network
// arguments and the released pipeline's reported settings (text encoders, guidance, stats folder).
std::string release_config_yaml(const nlohmann::ordered_json& network_args);

}  // namespace zest::hymotion
