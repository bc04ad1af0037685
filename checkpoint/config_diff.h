// Differences between two configuration texts (TOML), key by key, so that a checkpoint load can say
// exactly what changed ("model.depth: 12 in the checkpoint, 24 now"): the model's, and the components'.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace zest::checkpoint {

// One differing dotted key; values in TOML spelling, nullopt where the key is absent.
struct ConfigDifference {
  std::string key;
  std::optional<std::string> saved;
  std::optional<std::string> current;

  std::string text() const;  // "key: <saved> in the checkpoint, <current> now"
};

// The differing keys, in key order. Texts that are not TOML are compared line by line (after trimming
// and dropping blank and comment lines; the keys are "line N"). Empty when equivalent.
std::vector<ConfigDifference> diff_config(const std::string& saved, const std::string& current);

// diff_config's differences as text, one line each.
std::vector<std::string> diff_config_text(const std::string& saved, const std::string& current);

}  // namespace zest::checkpoint
