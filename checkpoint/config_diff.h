// Differences between two model configuration texts (TOML), key by key, so that a refused checkpoint
// load can say exactly what changed ("model.depth: 12 in the checkpoint, 24 now").
#pragma once

#include <string>
#include <vector>

namespace zest::checkpoint {

// One line per differing dotted key (values in TOML spelling). Texts that are not TOML are compared
// line by line (after trimming and dropping blank and comment lines). Empty when equivalent.
std::vector<std::string> diff_config_text(const std::string& saved, const std::string& current);

}  // namespace zest::checkpoint
