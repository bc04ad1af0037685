// FieldTable's non-template parts: TOML literals, diffs of written values, JSON records and the docs table.
#include "core/field_table.h"

#include <nlohmann/json.hpp>

#include <charconv>
#include <set>

namespace zest {

std::string toml_literal(bool v) { return v ? "true" : "false"; }
std::string toml_literal(int v) { return std::to_string(v); }
std::string toml_literal(int64_t v) { return std::to_string(v); }
std::string toml_literal(double v) { return toml_float(v); }
std::string toml_literal(const std::string& v) { return toml_string(v); }

namespace {

template <typename T>
std::string array_literal(const std::vector<T>& values) {
  std::string out = "[";
  for (size_t i = 0; i < values.size(); ++i) out += (i ? ", " : "") + toml_literal(values[i]);
  return out + "]";
}

}  // namespace

std::string toml_literal(const std::vector<int>& v) { return array_literal(v); }
std::string toml_literal(const std::vector<int64_t>& v) { return array_literal(v); }
std::string toml_literal(const std::vector<double>& v) { return array_literal(v); }
std::string toml_literal(const std::vector<std::string>& v) { return array_literal(v); }

std::string reference_number(double v) {
  if (v == static_cast<double>(static_cast<int64_t>(v))) return std::to_string(static_cast<int64_t>(v));
  char buffer[64];
  const auto result = std::to_chars(buffer, buffer + sizeof(buffer), v);
  return std::string(buffer, result.ptr);
}

std::vector<FieldDifference> diff_values(const std::vector<FieldValue>& a, const std::vector<FieldValue>& b) {
  std::map<std::string, std::string> in_b;
  for (const FieldValue& v : b) in_b[v.key] = v.toml;
  std::vector<FieldDifference> out;
  std::set<std::string> seen;
  for (const FieldValue& v : a) {
    seen.insert(v.key);
    const auto other = in_b.find(v.key);
    if (other == in_b.end()) out.push_back({v.key, v.toml, std::nullopt});
    else if (other->second != v.toml) out.push_back({v.key, v.toml, other->second});
  }
  for (const FieldValue& v : b)
    if (!seen.count(v.key)) out.push_back({v.key, std::nullopt, v.toml});
  return out;
}

nlohmann::ordered_json record_json(const std::vector<FieldValue>& values) {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  for (const FieldValue& v : values) {
    nlohmann::ordered_json* at = &out;
    size_t start = 0;
    for (size_t dot = v.key.find('.'); dot != std::string::npos; dot = v.key.find('.', start)) {
      at = &(*at)[v.key.substr(start, dot - start)];
      start = dot + 1;
    }
    // A TOML literal of a bool, number, string or array of them is JSON too, except nan and inf.
    nlohmann::ordered_json value = nlohmann::ordered_json::parse(v.toml, nullptr, /*allow_exceptions=*/false);
    if (value.is_discarded()) value = v.toml;
    (*at)[v.key.substr(start)] = std::move(value);
  }
  return out;
}

namespace {

std::string cell(const std::string& text) {
  std::string out;
  for (const char c : text) {
    if (c == '|') out += "\\|";
    else if (c == '\n') out += ' ';
    else out += c;
  }
  return out;
}

}  // namespace

std::string reference_markdown(const std::vector<FieldRow>& rows) {
  std::string out = "| section | key | type | default | meaning |\n|---|---|---|---|---|\n";
  for (const FieldRow& r : rows) {
    out += "| " + cell(r.section) + " | " + cell(r.key) + " | " + cell(r.type) + " | " + cell(r.default_text) +
           " | " + cell(r.meaning) + " |\n";
  }
  return out;
}

}  // namespace zest
