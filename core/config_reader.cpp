// ConfigTable: strict typed reads over a toml++ document, --set overrides, and the error messages
// (file:line:col, dotted key, expected type, did-you-mean) that every zest config error goes through.
#include "core/config_reader.h"

#include "core/check.h"
#include "core/config_writer.h"
#include "core/untrusted_file.h"

#include <toml++/toml.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <tuple>

namespace zest {

namespace {

// Config errors are the user's, not zest's: they carry the TOML location, not zest's source line, so
// they throw zest::Error directly rather than through ZEST_FAIL. Keys come from the file and are printed
// escaped (a quoted TOML key may hold terminal escape sequences).
[[noreturn]] void throw_at(const std::string& where, const std::string& key, const std::string& message) {
  throw Error(where + ": " + printable(key) + ": " + message);
}

// A string value from a file, quoted and escaped for a terminal, cut when long.
std::string quoted(const std::string& value) { return "\"" + printable(value, 80) + "\""; }

constexpr const char* kOverridePrefix = "--set ";

bool is_override_source(const std::string& source) { return source.rfind(kOverridePrefix, 0) == 0; }

std::string node_location(const toml::node& node, const std::string& file) {
  const toml::source_region& src = node.source();
  const std::string where = src.path ? *src.path : file;
  if (is_override_source(where) || src.begin.line == 0) return where;
  return where + ":" + std::to_string(src.begin.line) + ":" + std::to_string(src.begin.column);
}

// "a string (\"two\")": the kind of value found, with the value when it is short.
std::string describe(const toml::node& node) {
  std::ostringstream value;
  switch (node.type()) {
    case toml::node_type::table: return "a table";
    case toml::node_type::array: return "an array";
    case toml::node_type::string: value << "a string (" << quoted(node.as_string()->get()) << ")"; break;
    case toml::node_type::integer: value << "an integer (" << *node.as_integer() << ")"; break;
    case toml::node_type::floating_point: value << "a float (" << *node.as_floating_point() << ")"; break;
    case toml::node_type::boolean: value << "a boolean (" << *node.as_boolean() << ")"; break;
    default: return "a date/time";
  }
  return value.str();
}

template <typename T>
struct is_vector : std::false_type {};
template <typename E>
struct is_vector<std::vector<E>> : std::true_type {};

template <typename T>
std::string expected_name() {
  if constexpr (std::is_same_v<T, bool>) return "a boolean (true/false)";
  if constexpr (std::is_same_v<T, int> || std::is_same_v<T, int64_t>) return "an integer";
  if constexpr (std::is_same_v<T, double>) return "a number";
  if constexpr (std::is_same_v<T, std::string>) return "a string";
  if constexpr (is_vector<T>::value) {
    std::string element = expected_name<typename T::value_type>();
    return "an array of " + element.substr(element.find(' ') + 1) + "s";
  }
  return "?";
}

template <typename T>
[[noreturn]] void throw_wrong_type(const toml::node& node, const std::string& file, const std::string& key) {
  throw_at(node_location(node, file), key, "expected " + expected_name<T>() + ", got " + describe(node));
}

// Converts one node to T or throws naming the location, the key and the expected type.
template <typename T>
T convert(const toml::node& node, const std::string& file, const std::string& key) {
  const auto wrong_type = [&] { throw_wrong_type<T>(node, file, key); };
  if constexpr (is_vector<T>::value) {
    const toml::array* array = node.as_array();
    if (array == nullptr) throw_wrong_type<T>(node, file, key);
    T out;
    for (size_t i = 0; i < array->size(); ++i)
      out.push_back(convert<typename T::value_type>(*array->get(i), file, key + "[" + std::to_string(i) + "]"));
    return out;
  } else if constexpr (std::is_same_v<T, bool>) {
    if (!node.is_boolean()) wrong_type();
    return node.as_boolean()->get();
  } else if constexpr (std::is_same_v<T, int> || std::is_same_v<T, int64_t>) {
    if (!node.is_integer()) wrong_type();
    const int64_t value = node.as_integer()->get();
    if (value < std::numeric_limits<T>::min() || value > std::numeric_limits<T>::max())
      throw_at(node_location(node, file), key, "value " + std::to_string(value) + " is out of range");
    return static_cast<T>(value);
  } else if constexpr (std::is_same_v<T, double>) {
    if (node.is_integer()) return static_cast<double>(node.as_integer()->get());
    if (!node.is_floating_point()) wrong_type();
    return node.as_floating_point()->get();
  } else {
    static_assert(std::is_same_v<T, std::string>, "unsupported ConfigTable value type");
    if (!node.is_string()) wrong_type();
    // A NUL ("\u0000") would cut the string wherever it reaches the C library (a path, a message): refused.
    const std::string& value = node.as_string()->get();
    if (value.find('\0') != std::string::npos)
      throw_at(node_location(node, file), key, "contains a NUL character (\\u0000), which no name or path may hold");
    return value;
  }
}

std::string quote_list(const std::vector<std::string>& values) {
  std::string out;
  for (const std::string& value : values) out += (out.empty() ? "" : ", ") + quoted(value);
  return out;
}

// Moves every entry of `src` into `dst`; tables present in both are merged, anything else replaced.
// Moving (not copying) keeps the nodes' source regions, which name the --set argument in errors.
void merge_into(toml::table& dst, toml::table& src) {
  for (auto&& [key, node] : src) {
    const std::string name(key.str());
    toml::node* existing = dst.get(name);
    if (node.is_table() && existing != nullptr && existing->is_table()) {
      merge_into(*existing->as_table(), *node.as_table());
      continue;
    }
    node.visit([&](auto&& concrete) { dst.insert_or_assign(name, std::move(concrete)); });
  }
}

bool is_bare_word(const std::string& value) {
  return !value.empty() && std::all_of(value.begin(), value.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || std::strchr("_-./:+~@", c) != nullptr;
  });
}

bool is_dotted_key(const std::string& key) {
  if (key.empty() || key.front() == '.' || key.back() == '.' || key.find("..") != std::string::npos) return false;
  return std::all_of(key.begin(), key.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
  });
}

std::string trim(const std::string& s) {
  const size_t begin = s.find_first_not_of(" \t");
  const size_t end = s.find_last_not_of(" \t");
  return begin == std::string::npos ? "" : s.substr(begin, end - begin + 1);
}

const toml::table& empty_table() {
  static const toml::table empty;
  return empty;
}

}  // namespace

// ---------------------------------------------------------------------------------------------------
// Document and construction

struct ConfigTable::Document {
  toml::table root;
  std::string file;
  std::map<std::string, std::shared_ptr<std::set<std::string>>> known;  // by dotted table path

  std::shared_ptr<std::set<std::string>> known_for(const std::string& path) {
    auto& slot = known[path];
    if (!slot) slot = std::make_shared<std::set<std::string>>();
    return slot;
  }
};

ConfigTable::ConfigTable(std::shared_ptr<Document> doc, const toml::table* table, std::string path)
    : doc_(std::move(doc)), table_(table), file_(doc_->file), path_(std::move(path)),
      known_(doc_->known_for(path_)) {}

ConfigTable ConfigTable::parse_file(const std::string& path) {
  // A regular file of at most 16 MB (a FIFO named as the run file would block, /dev/zero never end).
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw Error(printable(path) + ": cannot read config file: no such file");
  return parse_string(read_text_file(path, "config file", uint64_t{16} << 20), path);
}

ConfigTable ConfigTable::parse_string(const std::string& text, const std::string& source_name) {
  auto doc = std::make_shared<Document>();
  doc->file = source_name;
  try {
    doc->root = toml::parse(std::string_view(text), std::string(source_name));
  } catch (const toml::parse_error& e) {
    throw Error(source_name + ":" + std::to_string(e.source().begin.line) + ":" +
                std::to_string(e.source().begin.column) + ": TOML syntax error: " + std::string(e.description()));
  }
  const toml::table* root = &doc->root;
  return ConfigTable(std::move(doc), root, "");
}

void ConfigTable::apply_overrides(const std::vector<std::string>& assignments) {
  ZEST_CHECK(table_ == &doc_->root && known_->empty(), "overrides go on the root table, before any read");
  for (const std::string& assignment : assignments) {
    const std::string source = kOverridePrefix + assignment;
    const size_t eq = assignment.find('=');
    const std::string key = trim(assignment.substr(0, eq));
    if (eq == std::string::npos || !is_dotted_key(key))
      throw Error(source + ": expected section.key=value (e.g. --set engine.stage=1)");
    const std::string value = trim(assignment.substr(eq + 1));
    toml::table parsed;
    try {
      parsed = toml::parse(key + " = " + value, std::string(source));
    } catch (const toml::parse_error& e) {
      if (!is_bare_word(value))
        throw Error(printable(source) + ": '" + printable(value) + "' is not a TOML value (" +
                    std::string(e.description()) + "); quote strings, e.g. " + key + "='\"text\"'");
      parsed = toml::parse(key + " = \"" + value + "\"", std::string(source));  // a bare word is a string
    }
    merge_into(doc_->root, parsed);
  }
}

// ---------------------------------------------------------------------------------------------------
// typed reads

template <typename T>
std::optional<T> ConfigTable::get_optional(const std::string& key) {
  known_->insert(key);
  const toml::node* node = find(key);
  if (node == nullptr) return std::nullopt;
  return convert<T>(*node, file_, dotted(key));
}

template <typename T>
T ConfigTable::get(const std::string& key, const T& fallback) {
  std::optional<T> value = get_optional<T>(key);
  return value ? *std::move(value) : fallback;
}

template <typename T>
T ConfigTable::required(const std::string& key) {
  std::optional<T> value = get_optional<T>(key);
  if (!value) fail(key, "required key is missing (expected " + expected_name<T>() + ")");
  return *std::move(value);
}

#define ZEST_CONFIG_TYPE(T)                                                    \
  template T ConfigTable::get<T>(const std::string&, const T&);                \
  template std::optional<T> ConfigTable::get_optional<T>(const std::string&); \
  template T ConfigTable::required<T>(const std::string&);
ZEST_CONFIG_TYPE(bool)
ZEST_CONFIG_TYPE(int)
ZEST_CONFIG_TYPE(int64_t)
ZEST_CONFIG_TYPE(double)
ZEST_CONFIG_TYPE(std::string)
ZEST_CONFIG_TYPE(std::vector<int>)
ZEST_CONFIG_TYPE(std::vector<int64_t>)
ZEST_CONFIG_TYPE(std::vector<double>)
ZEST_CONFIG_TYPE(std::vector<std::string>)
ZEST_CONFIG_TYPE(std::vector<bool>)
#undef ZEST_CONFIG_TYPE

std::string ConfigTable::get_choice(const std::string& key, const std::string& fallback,
                                    const std::vector<std::string>& allowed) {
  const std::string value = get<std::string>(key, fallback);
  if (std::find(allowed.begin(), allowed.end(), value) != allowed.end()) return value;
  const std::string guess = closest_match(value, allowed);
  fail(key, quoted(value) + " is not one of " + quote_list(allowed) +  // escaped: a value may hold controls
                (guess.empty() ? "" : " (did you mean \"" + guess + "\"?)"));
}

std::string ConfigTable::get_path(const std::string& key, const std::string& fallback) {
  const std::optional<std::string> value = get_optional<std::string>(key);
  if (!value) return fallback;
  if (value->empty()) fail(key, "path must not be empty");
  const std::filesystem::path path(*value);
  const toml::source_region& src = find(key)->source();
  if (path.is_absolute() || !src.path || is_override_source(*src.path)) return *value;
  return (std::filesystem::path(*src.path).parent_path() / path).lexically_normal().string();
}

// ---------------------------------------------------------------------------------------------------
// structure

const toml::node* ConfigTable::find(const std::string& key) const { return table_->get(key); }

bool ConfigTable::has(const std::string& key) const { return find(key) != nullptr; }

bool ConfigTable::is_array(const std::string& key) const {
  const toml::node* node = find(key);
  return node != nullptr && node->is_array();
}

bool ConfigTable::is_table(const std::string& key) const {
  const toml::node* node = find(key);
  return node != nullptr && node->is_table();
}

std::vector<std::string> ConfigTable::keys() const {
  // toml++ tables are sorted by name; order by source position (file first, then --set values).
  using Entry = std::tuple<bool, uint32_t, uint32_t, std::string>;
  std::vector<Entry> entries;
  for (auto&& [key, node] : *table_) {
    const toml::source_region& src = node.source();
    const bool is_override = src.path && is_override_source(*src.path);
    entries.emplace_back(is_override, src.begin.line, src.begin.column, std::string(key.str()));
  }
  std::sort(entries.begin(), entries.end());
  std::vector<std::string> out;
  for (const Entry& entry : entries) out.push_back(std::get<3>(entry));
  return out;
}

ConfigTable ConfigTable::table(const std::string& key) {
  known_->insert(key);
  const toml::node* node = find(key);
  if (node == nullptr) return ConfigTable(doc_, &empty_table(), dotted(key));
  if (!node->is_table())
    throw_at(location(node), dotted(key), "expected a table ([" + printable(dotted(key)) + "]), got " + describe(*node));
  return ConfigTable(doc_, node->as_table(), dotted(key));
}

void ConfigTable::mark_known(const std::string& key) { known_->insert(key); }

std::string ConfigTable::dotted(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }

const toml::table& ConfigTable::raw() const { return *table_; }

// ---------------------------------------------------------------------------------------------------
// errors

std::string ConfigTable::location(const toml::node* node) const {
  if (node == nullptr || node == &doc_->root) return file_;
  return node_location(*node, file_);
}

void ConfigTable::fail(const std::string& key, const std::string& message) const {
  const toml::node* node = find(key);
  throw_at(location(node != nullptr ? node : table_), dotted(key), message);
}

void ConfigTable::fail_table(const std::string& message) const {
  throw Error(location(table_) + ": " + (path_.empty() ? "" : "[" + printable(path_) + "]: ") + message);
}

void ConfigTable::reject_unknown_keys(const std::map<std::string, std::string>& hints) const {
  const std::vector<std::string> known(known_->begin(), known_->end());
  for (const std::string& key : keys()) {
    if (known_->count(key)) continue;
    const toml::node* node = find(key);
    const bool is_section = node->is_table();
    const std::string name = is_section ? "[" + dotted(key) + "]" : dotted(key);
    std::string message = is_section ? "unknown section" : "unknown key";
    const auto hint = hints.find(key);
    const std::string guess = closest_match(key, known);
    if (hint != hints.end()) {
      message += " (" + hint->second + ")";
    } else if (!guess.empty()) {
      message += is_section ? " (did you mean [" + dotted(guess) + "]?)" : " (did you mean '" + guess + "'?)";
    } else if (!known.empty()) {
      std::string list;
      for (const std::string& k : known) list += (list.empty() ? "" : ", ") + k;
      message += "; known " + std::string(path_.empty() ? "sections" : "keys") + ": " + list;
    }
    throw_at(is_section ? location(node) : key_location(key), name, message);
  }
}

std::string ConfigTable::key_location(const std::string& key) const {
  // A value's region starts at the value; for an unknown key the key itself is the place to point at.
  for (auto&& [k, node] : *table_) {
    if (k.str() != key) continue;
    const toml::source_region& src = k.source();
    if (src.path && !is_override_source(*src.path) && src.begin.line > 0)
      return *src.path + ":" + std::to_string(src.begin.line) + ":" + std::to_string(src.begin.column);
    return location(&node);
  }
  return location(table_);
}

// ---------------------------------------------------------------------------------------------------
// suggestions

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::string closest_match(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_distance = SIZE_MAX;
  for (const std::string& candidate : candidates) {
    const size_t distance = edit_distance(word, candidate);
    const size_t shorter = std::min(word.size(), candidate.size());
    // A typo changes a small part of the word; beyond half of it the match is a coincidence.
    if (distance <= std::max<size_t>(1, shorter / 2) && distance < best_distance) {
      best = candidate;
      best_distance = distance;
    }
  }
  if (!best.empty()) return best;
  for (const std::string& candidate : candidates) {  // a truncated or extended name: "bucket" → "bucket_mb"
    const bool contains = candidate.find(word) != std::string::npos || word.find(candidate) != std::string::npos;
    if (std::min(word.size(), candidate.size()) >= 3 && contains) return candidate;
  }
  return "";
}

}  // namespace zest
