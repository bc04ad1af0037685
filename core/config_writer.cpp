// ConfigWriter: TOML rendering of resolved configs (keys aligned, docs as trailing comments).
#include "core/config_writer.h"

#include "core/check.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace zest {

std::string toml_string(const std::string& value) {
  std::string out = "\"";
  for (const char c : value) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
          char escaped[8];
          std::snprintf(escaped, sizeof(escaped), "\\u%04x", static_cast<unsigned>(c));
          out += escaped;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

std::string toml_float(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  char buffer[64];
  const auto result = std::to_chars(buffer, buffer + sizeof(buffer), value);  // shortest round trip
  std::string text(buffer, result.ptr);
  // "65536" would read back as an integer; TOML floats need a fraction or an exponent.
  if (text.find_first_of(".e") == std::string::npos) text += ".0";
  return text;
}

ConfigWriter::ConfigWriter(std::string path, std::string doc) : path_(std::move(path)), doc_(std::move(doc)) {}

void ConfigWriter::add(const std::string& key, std::string value, const std::string& doc) {
  ZEST_CHECK(std::none_of(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.key == key; }),
             "config key ", key, " written twice");
  entries_.push_back({key, std::move(value), doc});
}

void ConfigWriter::set(const std::string& key, bool value, const std::string& doc) {
  add(key, value ? "true" : "false", doc);
}
void ConfigWriter::set(const std::string& key, int value, const std::string& doc) {
  add(key, std::to_string(value), doc);
}
void ConfigWriter::set(const std::string& key, int64_t value, const std::string& doc) {
  add(key, std::to_string(value), doc);
}
void ConfigWriter::set(const std::string& key, double value, const std::string& doc) {
  add(key, toml_float(value), doc);
}
void ConfigWriter::set(const std::string& key, const std::string& value, const std::string& doc) {
  add(key, toml_string(value), doc);
}
void ConfigWriter::set(const std::string& key, const char* value, const std::string& doc) {
  add(key, toml_string(value), doc);
}
void ConfigWriter::set(const std::string& key, const std::vector<double>& value, const std::string& doc) {
  std::string out = "[";
  for (size_t i = 0; i < value.size(); ++i) out += (i ? ", " : "") + toml_float(value[i]);
  add(key, out + "]", doc);
}
void ConfigWriter::set(const std::string& key, const std::vector<int64_t>& value, const std::string& doc) {
  std::string out = "[";
  for (size_t i = 0; i < value.size(); ++i) out += (i ? ", " : "") + std::to_string(value[i]);
  add(key, out + "]", doc);
}
void ConfigWriter::set(const std::string& key, const std::vector<std::string>& value, const std::string& doc) {
  std::string out = "[";
  for (size_t i = 0; i < value.size(); ++i) out += (i ? ", " : "") + toml_string(value[i]);
  add(key, out + "]", doc);
}

void ConfigWriter::set_literal(const std::string& key, const std::string& literal, const std::string& doc) {
  add(key, literal, doc);
}

ConfigWriter& ConfigWriter::table(const std::string& key, const std::string& doc) {
  tables_.push_back(std::make_unique<ConfigWriter>(path_.empty() ? key : path_ + "." + key, doc));
  return *tables_.back();
}

void ConfigWriter::render(std::string& out) const {
  if (!path_.empty()) {
    if (!out.empty()) out += "\n";
    if (!doc_.empty()) out += "# " + doc_ + "\n";
    out += "[" + path_ + "]\n";
  }
  size_t width = 0;  // align the doc comments of one table
  for (const Entry& e : entries_) width = std::max(width, e.key.size() + 3 + e.value.size());
  for (const Entry& e : entries_) {
    std::string line = e.key + " = " + e.value;
    if (!e.doc.empty()) line += std::string(width - line.size() + 2, ' ') + "# " + e.doc;
    out += line + "\n";
  }
  for (const auto& table : tables_) table->render(out);
}

std::string ConfigWriter::str() const {
  std::string out;
  render(out);
  return out;
}

}  // namespace zest
