// `[model] pretrained`: what a path holds (a diffusers UNet folder, a diffusers pipeline folder's unet/,
// HY-Motion's released folder, or a safetensors file with the model's own names), the architecture a
// folder's own config gives, and the record a checkpoint keeps so that an export can write the original
// folder format again (original config text, a release's pipeline tensors).
#pragma once

#include "models/model_resolve.h"

#include <nlohmann/json.hpp>

#include <string>

namespace zest {

enum class PretrainedFormat { diffusers, hymotion, safetensors };
const char* to_string(PretrainedFormat format);

struct PretrainedLayout {
  PretrainedFormat format = PretrainedFormat::safetensors;
  std::string folder;        // the folder holding config and weights ("" for a plain file)
  std::string config_file;   // config.json / config.yml ("" for a plain file)
  std::string weights_file;  // diffusion_pytorch_model.safetensors[.index.json] / latest.ckpt / the file
};

// Recognises `path` by the files present; the error lists what was looked for and what was found.
PretrainedLayout find_pretrained_layout(const std::string& path);

// A model whose family and configuration come from a pretrained folder's config (config.json read as
// diffusers reads it; config.yml's network_module_args). Fields the model ignores go to `notes`.
ResolvedModel resolve_pretrained_folder(const std::string& path);

// What the trainer saves with every checkpoint (extra metadata "model_source"): {"family": ...,
// "format": "zest" | "diffusers" | "hymotion"} plus, for a pretrained folder, "config_text" (its config
// file, verbatim) and for a HY-Motion release "tensors" (its pipeline tensors, tensor_json.h).
nlohmann::json model_source_record(const ResolvedModel& model);

}  // namespace zest
