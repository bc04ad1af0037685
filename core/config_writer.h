// ConfigWriter: renders a resolved config back to TOML, keys in the order written, each with its
// one-line doc as a trailing comment (used by `zest config check` and the run directory's config copy).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace zest {

class ConfigWriter {
 public:
  // `path` is the dotted name of this table ("" for the document root).
  explicit ConfigWriter(std::string path = "", std::string doc = "");

  void set(const std::string& key, bool value, const std::string& doc = "");
  void set(const std::string& key, int value, const std::string& doc = "");
  void set(const std::string& key, int64_t value, const std::string& doc = "");
  void set(const std::string& key, double value, const std::string& doc = "");
  void set(const std::string& key, const std::string& value, const std::string& doc = "");
  void set(const std::string& key, const char* value, const std::string& doc = "");
  void set(const std::string& key, const std::vector<double>& value, const std::string& doc = "");
  void set(const std::string& key, const std::vector<int64_t>& value, const std::string& doc = "");
  void set(const std::string& key, const std::vector<std::string>& value, const std::string& doc = "");
  // A value already in TOML syntax (core/field_table.h's toml_literal).
  void set_literal(const std::string& key, const std::string& literal, const std::string& doc = "");

  // A nested table, rendered as [path.key] after this table's own keys; `doc` becomes a comment line.
  ConfigWriter& table(const std::string& key, const std::string& doc = "");

  std::string str() const;

 private:
  struct Entry {
    std::string key;
    std::string value;  // already in TOML syntax
    std::string doc;
  };
  void add(const std::string& key, std::string value, const std::string& doc);
  void render(std::string& out) const;

  std::string path_;
  std::string doc_;
  std::vector<Entry> entries_;
  std::vector<std::unique_ptr<ConfigWriter>> tables_;
};

// TOML literals, shared with tests: a quoted basic string, and a float that reads back as a float.
std::string toml_string(const std::string& value);
std::string toml_float(double value);

}  // namespace zest
