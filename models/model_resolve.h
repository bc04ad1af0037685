// Resolves a run file's [model] selection to its family and configuration text (a built-in flavor, a
// model TOML file, or a pretrained folder's own config), the one place that turns "which model" into
// something a family can build.
#pragma once

#include "core/config_reader.h"
#include "engine/unit_module.h"
#include "models/model_selection.h"
#include "models/registry.h"

#include <memory>
#include <string>
#include <vector>

namespace zest {

struct ResolvedModel {
  const ModelFamily* family = nullptr;
  std::string name;         // flavor name, or the file's stem
  std::string toml_text;    // the model configuration (reference field names)
  std::string source;       // where the text came from, for messages ("built-in hymotion_tiny" / a path)
  std::string description;  // "hymotion_tiny (hymotion)"
  std::string pretrained;   // [model] pretrained: where the starting weights are ("" = none)
  std::vector<std::string> notes;  // what reading a pretrained config reported (fields it ignored)
};

// A file's family is model.family when given, else the family whose name prefixes the file name
// (hymotion_*.toml, unet_*.toml); anything else is an error asking for model.family. A pretrained
// folder's family and configuration come from the folder (models/pretrained_source.h). A relative
// model.config was already made relative to its run file when the run file was read (ConfigTable::get_path).
ResolvedModel resolve_model(const ModelSelection& selection);

// The text of a model configuration file (a zest TOML or a folder's config), at most 16 MiB; errors name the
// file and what is wrong with it.
std::string read_model_config_text(const std::string& path);

// The configuration as a ConfigTable (errors name the configuration's source).
ConfigTable model_config_table(const ResolvedModel& model);
std::shared_ptr<UnitModule> build_model(const ResolvedModel& model);
int64_t count_model_parameters(const ResolvedModel& model);

}  // namespace zest
