// Key-by-key TOML comparison for load's mismatch report (see config_diff.h).
#include "checkpoint/config_diff.h"

#include "core/config_writer.h"

#include <toml++/toml.h>

#include <map>
#include <optional>
#include <set>
#include <sstream>

namespace zest::checkpoint {
namespace {

using Flat = std::map<std::string, std::string>;

// TOML spelling of a value, floats in their shortest round-trip form: toml++ prints 17 significant
// digits (0.9 as 0.90000000000000002), which buries the value a reader wrote.
std::string value_text(const toml::node& node) {
  if (const auto* number = node.as_floating_point()) return toml_float(number->get());
  if (const auto* array = node.as_array()) {
    if (array->empty()) return "[]";
    std::string out = "[ ";
    for (size_t i = 0; i < array->size(); ++i) out += (i ? ", " : "") + value_text(*array->get(i));
    return out + " ]";
  }
  std::ostringstream value;
  node.visit([&value](const auto& leaf) { value << leaf; });  // strings, integers, booleans, dates
  return value.str();
}

void flatten(const toml::table& table, const std::string& prefix, Flat& out) {
  for (const auto& [key, node] : table) {
    const std::string name = prefix.empty() ? std::string(key.str()) : prefix + "." + std::string(key.str());
    if (const toml::table* sub = node.as_table()) {
      flatten(*sub, name, out);
    } else {
      out[name] = value_text(node);
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

std::string ConfigDifference::text() const {
  return key + ": " + (saved ? *saved + " in the checkpoint" : "absent in the checkpoint") + ", " +
         (current ? *current + " now" : "absent now");
}

std::vector<ConfigDifference> diff_config(const std::string& saved, const std::string& current) {
  auto a = parse_flat(saved);
  auto b = parse_flat(current);
  if (!a || !b) {
    a = lines_of(saved);
    b = lines_of(current);
  }
  std::set<std::string> keys;
  for (const auto& [k, v] : *a) keys.insert(k);
  for (const auto& [k, v] : *b) keys.insert(k);
  std::vector<ConfigDifference> out;
  for (const std::string& key : keys) {
    const auto in_a = a->find(key);
    const auto in_b = b->find(key);
    ConfigDifference d{key, std::nullopt, std::nullopt};
    if (in_a != a->end()) d.saved = in_a->second;
    if (in_b != b->end()) d.current = in_b->second;
    if (d.saved != d.current) out.push_back(std::move(d));
  }
  return out;
}

std::vector<std::string> diff_config_text(const std::string& saved, const std::string& current) {
  std::vector<std::string> out;
  for (const ConfigDifference& d : diff_config(saved, current)) out.push_back(d.text());
  return out;
}

}  // namespace zest::checkpoint
