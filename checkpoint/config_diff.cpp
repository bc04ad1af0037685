// Key-by-key TOML comparison for load's mismatch report (see config_diff.h).
#include "checkpoint/config_diff.h"

#include <toml++/toml.h>

#include <map>
#include <optional>
#include <set>
#include <sstream>

namespace zest::checkpoint {
namespace {

using Flat = std::map<std::string, std::string>;

void flatten(const toml::table& table, const std::string& prefix, Flat& out) {
  for (const auto& [key, node] : table) {
    const std::string name = prefix.empty() ? std::string(key.str()) : prefix + "." + std::string(key.str());
    if (const toml::table* sub = node.as_table()) {
      flatten(*sub, name, out);
    } else {
      std::ostringstream value;
      node.visit([&value](const auto& leaf) { value << leaf; });  // TOML spelling of a value or array
      out[name] = value.str();
    }
  }
}

std::optional<Flat> parse_flat(const std::string& text) {
  try {
    const toml::table root = toml::parse(text);
    Flat flat;
    flatten(root, "", flat);
    return flat;
  } catch (const toml::parse_error&) {
    return std::nullopt;
  }
}

// Fallback for non-TOML text: meaningful lines, numbered so a difference can be located.
Flat lines_of(const std::string& text) {
  Flat flat;
  std::istringstream in(text);
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    const auto begin = line.find_first_not_of(" \t\r");
    if (begin == std::string::npos || line[begin] == '#') continue;
    const auto end = line.find_last_not_of(" \t\r");
    flat["line " + std::to_string(++number)] = line.substr(begin, end - begin + 1);
  }
  return flat;
}

}  // namespace

std::vector<std::string> diff_config_text(const std::string& saved, const std::string& current) {
  auto a = parse_flat(saved);
  auto b = parse_flat(current);
  if (!a || !b) {
    a = lines_of(saved);
    b = lines_of(current);
  }
  std::set<std::string> keys;
  for (const auto& [k, v] : *a) keys.insert(k);
  for (const auto& [k, v] : *b) keys.insert(k);
  std::vector<std::string> out;
  for (const std::string& key : keys) {
    const auto in_a = a->find(key);
    const auto in_b = b->find(key);
    if (in_b == b->end()) {
      out.push_back(key + ": " + in_a->second + " in the checkpoint, absent now");
    } else if (in_a == a->end()) {
      out.push_back(key + ": absent in the checkpoint, " + in_b->second + " now");
    } else if (in_a->second != in_b->second) {
      out.push_back(key + ": " + in_a->second + " in the checkpoint, " + in_b->second + " now");
    }
  }
  return out;
}

}  // namespace zest::checkpoint
