// ModelSelection: the [model] table of a run file: a built-in configuration by name, or a model TOML
// file by path (exactly one of them).
#pragma once

#include <string>

namespace zest {

class ConfigTable;   // core/config_reader.h
class ConfigWriter;  // core/config_writer.h

struct ModelSelection {
  std::string name;         // built-in configuration (configs/models/<name>.toml), e.g. "hymotion_tiny"
  std::string config_path;  // or a model TOML file; a relative path is resolved against the run file's folder
  std::string family;       // with config: "hymotion" | "unet" (default: from the file name, <family>_*.toml)

  bool is_builtin() const { return !name.empty(); }

  // Reads [model]: exactly one of name / config; the name must be a built-in configuration and the
  // file must exist.
  static ModelSelection from_toml(ConfigTable& table);
};

void to_toml(const ModelSelection& config, ConfigWriter& out);

}  // namespace zest
