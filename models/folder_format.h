// What a model family says about its pretrained folder formats (diffusers' UNet folder, HY-Motion's
// release): how a folder is recognised, read and opened, and how an export writes it again.
#pragma once

#include "checkpoint/merge.h"

#include "formats/json_field.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace zest {

class PretrainedWeights;  // models/pretrained_weights.h

// The format of a plain weights file with the model's own names (no family owns it).
inline constexpr const char* kSafetensorsFormat = "safetensors";

struct PretrainedLayout {
  std::string format = kSafetensorsFormat;  // kSafetensorsFormat or a family's FolderFormat::name
  std::string folder;        // the folder holding config and weights ("" for a plain file)
  std::string config_file;   // config.json / config.yml ("" for a plain file)
  std::string weights_file;  // diffusion_pytorch_model.safetensors[.index.json] / latest.ckpt / the file
};

// A folder's config file read as the family's model configuration.
struct FolderConfig {
  // The family's configuration fields in file order (the model-configuration TOML's keys).
  nlohmann::ordered_json architecture = nlohmann::ordered_json::object();
  // Fields the model does not take: reported, and ignored as the format's own loader ignores them.
  std::vector<std::string> notes;
};

// One export of a checkpoint into a format's folder.
struct FolderExport {
  const std::string& dir;                   // the checkpoint's step folder (named in messages)
  const checkpoint::Manifest& manifest;
  const JsonField& source;                  // the checkpoint's model_source record (checked: pretrained_source.h)
  const std::filesystem::path& out;         // the folder to write (created by export_weights)
  const checkpoint::MergeOptions& options;
};

struct FolderFormat {
  // "diffusers", "hymotion": PretrainedLayout::format, model_source's "format", `zest merge --format`.
  std::string name;
  // What "not a model folder" says was looked for, e.g. "config.yml + latest.ckpt (HY-Motion release)".
  std::string expected_files;
  // The TOML header's words for the architecture, e.g. "diffusers' UNet2DConditionModel fields".
  std::string config_fields;
  std::string config_name;  // the config file an export writes into its folder (config.json)
  // The weights file of the folder when it is one safetensors file under the model's own names ("" when
  // not): where an export of a model held in memory (a LoRA run's, folded) writes.
  std::string weights_name;

  // `folder`'s layout when it holds this format's files, nullopt when it holds none of them; an error
  // naming what is missing (and what was found) when it holds only some.
  std::function<std::optional<PretrainedLayout>(const std::filesystem::path& folder)> find_layout;
  // The config file's text as a model configuration; errors name `path`.
  std::function<FolderConfig(const std::string& config_text, const std::string& path)> read_config;
  // The config file for a network zest configured itself (the model configuration as JSON).
  std::function<std::string(const nlohmann::ordered_json& model_config)> write_config;
  // Writes the weights into FolderExport::out (created); the config file is written after them.
  std::function<checkpoint::MergeResult(const FolderExport& request)> export_weights;
  // Optional: the weights, when they are not safetensors (+ index) under the model's own names.
  std::function<std::unique_ptr<PretrainedWeights>(const PretrainedLayout& layout)> open_weights;
  // Optional: what a checkpoint's model_source record keeps besides the config text (a release's
  // pipeline tensors), so that an export writes them again.
  std::function<void(const PretrainedLayout& layout, nlohmann::json& record)> add_source_record;
};

// "a, b/, c" of what `folder` holds ("nothing" when empty), for errors about a folder's files.
inline std::string folder_listing(const std::filesystem::path& folder) {
  std::string names;
  for (const auto& entry : std::filesystem::directory_iterator(folder))
    names += (names.empty() ? "" : ", ") + entry.path().filename().string() + (entry.is_directory() ? "/" : "");
  return names.empty() ? "nothing" : names;
}

}  // namespace zest
