// ConfigTable: typed, strict access to one TOML table. Every error names the file, line:column, the
// dotted key and what was expected; keys never read are reported as unknown (with "did you mean").
// Every config struct in zest is filled through this (one from_toml per component).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

// toml++ 3.x (Debian 12 ships 3.3; the header-only copy elsewhere is 3.x too) puts its types in the
// inline namespace toml::v3; forward-declared so that users of this header don't parse toml++.
namespace toml {
inline namespace v3 {
class table;
class node;
}  // namespace v3
}  // namespace toml

namespace zest {

class ConfigTable {
 public:
  // Parses a TOML file; a syntax error names the file, line and column.
  static ConfigTable parse_file(const std::string& path);
  // Parses TOML text; `source_name` stands in for the file name in messages.
  static ConfigTable parse_string(const std::string& text, const std::string& source_name);

  // Layers command-line overrides over the parsed document (root table only, before any read).
  // Each is "section.key=value" with a TOML value (`engine.stage=1`, `optimizer.betas=[0.9, 0.95]`);
  // a bare word that is not valid TOML is taken as a string (`engine.precision=fp16`). Overridden
  // values are then read and validated exactly like the file's; their errors name the --set argument.
  void apply_overrides(const std::vector<std::string>& assignments);

  // Value of `key`, or `fallback` when absent. Supported T: bool, int, int64_t, double (an integer
  // literal is accepted for a double), std::string, std::vector<int>, std::vector<int64_t>,
  // std::vector<double>, std::vector<std::string>, std::vector<bool>. A wrong type is an error naming
  // the expected type.
  template <typename T>
  T get(const std::string& key, const T& fallback);
  template <typename T>
  std::optional<T> get_optional(const std::string& key);
  template <typename T>
  T required(const std::string& key);

  // A string restricted to `allowed`; the error lists the allowed values.
  std::string get_choice(const std::string& key, const std::string& fallback,
                         const std::vector<std::string>& allowed);

  // A choice mapped to an enum: the allowed names are to_string(v) for v in `values` (found by ADL).
  template <typename Enum, size_t N>
  Enum get_enum(const std::string& key, Enum fallback, const Enum (&values)[N]) {
    std::vector<std::string> names;
    for (const Enum value : values) names.emplace_back(to_string(value));
    const std::string chosen = get_choice(key, to_string(fallback), names);
    for (const Enum value : values)
      if (chosen == to_string(value)) return value;
    return fallback;
  }

  // A path string; a relative path is resolved against the directory of the file that set it (the
  // working directory for a --set override). Absent → fallback, unchanged.
  std::string get_path(const std::string& key, const std::string& fallback);

  bool has(const std::string& key) const;
  bool is_array(const std::string& key) const;
  bool is_table(const std::string& key) const;
  std::vector<std::string> keys() const;  // keys present in this table, in file order

  // Nested table (absent → an empty table with the same file and dotted path).
  ConfigTable table(const std::string& key);

  // Marks a key as known without reading it (e.g. a section consumed by another component).
  void mark_known(const std::string& key);

  // Errors at a key's location, e.g. for range and cross-field checks: "FILE:LINE:COL: engine.stage: MSG".
  [[noreturn]] void fail(const std::string& key, const std::string& message) const;
  // Error at the table itself (no key).
  [[noreturn]] void fail_table(const std::string& message) const;

  // Throws on the first key present in the table but never read or marked known, suggesting the
  // closest known key. Call after a component has read everything it understands. `hints` maps
  // foreign spellings to advice (e.g. DeepSpeed's "zero_optimization" → "use [engine] stage").
  void reject_unknown_keys(const std::map<std::string, std::string>& hints = {}) const;

  const std::string& file() const { return file_; }
  const std::string& path() const { return path_; }  // dotted path of this table, "" for the root
  std::string dotted(const std::string& key) const;   // "engine.loss_scale.window"

  // Access to the underlying toml++ table, for writing it back or advanced cases.
  const toml::table& raw() const;

 private:
  struct Document;  // the parsed root plus the read-key bookkeeping shared by every view of it

  ConfigTable(std::shared_ptr<Document> doc, const toml::table* table, std::string path);
  const toml::node* find(const std::string& key) const;
  std::string location(const toml::node* node) const;
  std::string key_location(const std::string& key) const;

  std::shared_ptr<Document> doc_;  // keeps the parsed document alive
  const toml::table* table_ = nullptr;
  std::string file_;
  std::string path_;
  std::shared_ptr<std::set<std::string>> known_;  // keys read or marked known in this table
};

// Levenshtein distance, for "did you mean" suggestions.
size_t edit_distance(const std::string& a, const std::string& b);

// The closest of `candidates` to `word` when it is close enough to be a likely typo (or one contains
// the other, e.g. "bucket" → "bucket_mb"); "" otherwise.
std::string closest_match(const std::string& word, const std::vector<std::string>& candidates);

}  // namespace zest
