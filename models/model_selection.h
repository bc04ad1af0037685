// ModelSelection: the [model] table of a run file: a built-in configuration by name, a model TOML file
// by path, or a pretrained folder whose own config gives the architecture; plus the pretrained weights.
#pragma once

#include <string>

namespace zest {

class ConfigTable;   // core/config_reader.h
class ConfigWriter;  // core/config_writer.h
template <typename C>
class FieldTable;  // core/field_table.h

struct ModelSelection {
  std::string name;         // built-in configuration (configs/models/<name>.toml), e.g. "hymotion_tiny"
  std::string config_path;  // or a model TOML file; a relative path is resolved against the run file's folder
  std::string family;       // with config: "hymotion" | "unet" (default: from the file name, <family>_*.toml)
  // Released weights to start from (models/pretrained_source.h): a diffusers UNet or pipeline folder or
  // HY-Motion's released folder (their config gives the architecture: no name/config), or a
  // .safetensors file with the model's own names (name/config give the architecture). Resolved like
  // config against the run file's folder.
  std::string pretrained;
  bool strict = true;  // every tensor must match; false: report mismatches and load the rest

  bool is_builtin() const { return !name.empty(); }
  bool has_pretrained_folder() const;  // pretrained names a folder (then it gives the architecture)

  // Reads [model]: exactly one of name / config / a pretrained folder; the name must be a built-in
  // configuration and the files must exist.
  static ModelSelection from_toml(ConfigTable& table);
};

void to_toml(const ModelSelection& config, ConfigWriter& out);
const FieldTable<ModelSelection>& model_fields();  // the [model] table (core/field_table.h)

}  // namespace zest
