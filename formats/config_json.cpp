// JSON ↔ TOML for model configurations (see config_json.h).
#include "formats/config_json.h"

#include "core/check.h"
#include "core/config_writer.h"

#include <toml++/toml.h>

#include <sstream>

namespace zest {
namespace {

bool is_bare_key(const std::string& key) {
  if (key.empty()) return false;
  for (const char c : key) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

std::string toml_key(const std::string& key) { return is_bare_key(key) ? key : toml_string(key); }

std::string toml_value(const nlohmann::ordered_json& value, const std::string& field, const std::string& source) {
  switch (value.type()) {
    case nlohmann::ordered_json::value_t::boolean: return value.get<bool>() ? "true" : "false";
    case nlohmann::ordered_json::value_t::number_integer: return std::to_string(value.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: return std::to_string(value.get<uint64_t>());
    case nlohmann::ordered_json::value_t::number_float: return toml_float(value.get<double>());
    case nlohmann::ordered_json::value_t::string: return toml_string(value.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      std::string out = "[";
      for (size_t i = 0; i < value.size(); ++i) out += (i ? ", " : "") + toml_value(value[i], field, source);
      return out + "]";
    }
    case nlohmann::ordered_json::value_t::object: {
      std::string out = "{";
      bool first = true;
      for (const auto& [key, item] : value.items()) {
        if (item.is_null()) continue;  // None: the constructor's default
        out += std::string(first ? " " : ", ") + toml_key(key) + " = " + toml_value(item, field + "." + key, source);
        first = false;
      }
      return out + (first ? "}" : " }");
    }
    default: ZEST_FAIL(source, ": field '", field, "': ", value.dump(), " cannot be written as a model configuration value");
  }
}

nlohmann::ordered_json json_value(const toml::node& node, const std::string& field, const std::string& source) {
  if (const auto* v = node.as_boolean()) return v->get();
  if (const auto* v = node.as_integer()) return v->get();
  if (const auto* v = node.as_floating_point()) return v->get();
  if (const auto* v = node.as_string()) return v->get();
  if (const auto* array = node.as_array()) {
    nlohmann::ordered_json out = nlohmann::ordered_json::array();
    for (const toml::node& item : *array) out.push_back(json_value(item, field, source));
    return out;
  }
  if (const auto* table = node.as_table()) {
    nlohmann::ordered_json out = nlohmann::ordered_json::object();
    for (const auto& [key, item] : *table) out[std::string(key.str())] = json_value(item, field + "." + std::string(key.str()), source);
    return out;
  }
  ZEST_FAIL(source, ": field '", field, "' has a date/time value, which no model configuration uses");
}

}  // namespace

std::string json_to_toml(const nlohmann::ordered_json& object, const std::string& header, const std::string& source) {
  ZEST_CHECK(object.is_object(), source, ": expected an object of configuration fields, got ", object.type_name());
  std::ostringstream out;
  std::istringstream lines(header);
  for (std::string line; std::getline(lines, line);) out << "# " << line << "\n";
  for (const auto& [key, value] : object.items()) {
    if (value.is_null()) continue;
    if (value.is_array()) {
      for (const auto& item : value)
        ZEST_CHECK(!item.is_null(), source, ": field '", key, "' holds a null inside a list, which zest cannot read");
    }
    out << toml_key(key) << " = " << toml_value(value, key, source) << "\n";
  }
  return out.str();
}

nlohmann::ordered_json toml_to_json(const std::string& toml_text, const std::string& source) {
  toml::table root;
  try {
    root = toml::parse(toml_text, source);
  } catch (const toml::parse_error& e) {
    ZEST_FAIL(source, ": not a valid model configuration (TOML): ", e.description());
  }
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  for (const auto& [key, node] : root) out[std::string(key.str())] = json_value(node, std::string(key.str()), source);
  return out;
}

}  // namespace zest
