// The text of every configs/models/*.toml, embedded into the binary at build time by
// cmake/embed_configs.cmake (which generates the definition into the build directory).
#pragma once

#include <string_view>
#include <vector>

namespace zest::detail {

struct EmbeddedConfigFile {
  std::string_view file_name;  // "hymotion_1b.toml"
  std::string_view text;
};

// In file-name order.
const std::vector<EmbeddedConfigFile>& embedded_model_config_files();

}  // namespace zest::detail
