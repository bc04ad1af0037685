// JsonField: typed, checked access to one value of a parsed JSON document, the one way zest reads a field
// of a JSON file (configs, tokenizer files, index files, dataset listings, manifests, our own checkpoint
// records), and the JSON library's errors as sentences (also for safetensors headers). The document is
// parsed by formats/json_text.h; a field works over either document type the parser builds
// (nlohmann::json, whose std::map objects suit the 150,000-entry vocabularies, or nlohmann::ordered_json,
// which keeps member order: the manifest checksum hashes it as written). Every error is one line in one
// style, naming the file, the value's path and what was expected, e.g.
//   "DIR/manifest.json: field 'units[2].params[0].shape' must be an array of integers >= 0, got a string"
// and never the JSON library's text.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace zest {

using Json = nlohmann::ordered_json;  // keeps member order: the manifest checksum hashes it as written

// The bounds of a number: " > 0", " in (0, 1)", " in [0, 1]", ... in messages.
struct NumberRange {
  double min = -std::numeric_limits<double>::infinity();
  double max = std::numeric_limits<double>::infinity();
  bool min_open = false;  // min itself excluded
  bool max_open = false;  // max itself excluded

  static NumberRange any() { return {}; }
  static NumberRange positive() { return {0, std::numeric_limits<double>::infinity(), true, false}; }  // > 0
  static NumberRange at_least(double min) { return {min, std::numeric_limits<double>::infinity(), false, false}; }
  static NumberRange open(double min, double max) { return {min, max, true, true}; }        // (min, max)
  static NumberRange closed(double min, double max) { return {min, max, false, false}; }    // [min, max]
  static NumberRange above_up_to(double min, double max) { return {min, max, true, false}; }  // (min, max]
  bool contains(double value) const;
  std::string phrase() const;  // "", " > 0", " in (0, 1)", ...
};

class JsonField {
 public:
  // The document itself, or a value inside a larger one at `path` (e.g. a checkpoint's "extra" record,
  // parsed again from the text the manifest keeps). Path "": errors name the file only.
  JsonField(const nlohmann::json& value, std::string file, std::string path = "")
      : value_(&value), ordered_(false), file_(std::move(file)), path_(std::move(path)) {}
  JsonField(const nlohmann::ordered_json& value, std::string file, std::string path = "")
      : value_(&value), ordered_(true), file_(std::move(file)), path_(std::move(path)) {}

  const std::string& file() const { return file_; }
  const std::string& path() const { return path_; }

  // This field, and every field reached from it, reading a null member as an absent one (a JSON null
  // is Python's None, which diffusers' and transformers' configs write for "the default").
  JsonField null_as_absent() const;

  // ---- presence and type (each false for an absent member) ----
  bool exists() const;  // present (and, under null_as_absent, not null)
  bool is_null() const;
  bool is_boolean() const;
  bool is_integer() const;  // an integer (not 3.0)
  bool is_number() const;   // an integer or a float
  bool is_string() const;
  bool is_array() const;
  bool is_object() const;

  // ---- members and elements ----
  // at() requires an object; a missing member is reported by the accessor called on it (which knows what
  // was expected). has(key): this is an object whose member `key` exists(). items() requires an array,
  // members() an object (in the document's order), size() either.
  bool has(const std::string& key) const;
  JsonField at(const std::string& key) const;
  std::vector<JsonField> items() const;
  std::vector<std::pair<std::string, JsonField>> members() const;
  size_t size() const;
  const JsonField& object() const;  // requires a JSON object; returns this field

  // ---- scalars, each required to have exactly that JSON type and to lie in range ----
  int64_t integer(int64_t min = std::numeric_limits<int64_t>::min(),
                  int64_t max = std::numeric_limits<int64_t>::max()) const;
  // An integer that fits an int (the int's own bounds are not spelled out in messages).
  int to_int(int min = std::numeric_limits<int>::min(), int max = std::numeric_limits<int>::max()) const;
  double number(const NumberRange& range = {}) const;  // an integer or a float, finite, in range
  bool boolean() const;
  std::string string() const;
  // A string that is one of `names` ("must be one of \"a\", \"b\", got ...").
  std::string one_of(const std::vector<std::string>& names) const;
  // An enum by its name in the file; `choices` is a list of (name, value) pairs, written out or built from a table.
  template <typename Enum>
  Enum choice(std::initializer_list<std::pair<const char*, Enum>> choices) const {
    return choice_among<Enum>(choices);
  }
  template <typename Enum, typename Choices>
  Enum choice_among(const Choices& choices) const {
    std::vector<std::string> names;
    for (const auto& c : choices) names.emplace_back(c.first);
    const std::string name = one_of(names);
    for (const auto& c : choices)
      if (name == c.first) return c.second;
    return choices.begin()->second;  // not reached: one_of refused every other name
  }

  // ---- optional members: `fallback` when the member does not exist() ----
  int64_t integer_or(int64_t fallback, int64_t min = std::numeric_limits<int64_t>::min(),
                     int64_t max = std::numeric_limits<int64_t>::max()) const;
  double number_or(double fallback, const NumberRange& range = {}) const;
  bool boolean_or(bool fallback) const;
  std::string string_or(const std::string& fallback) const;
  std::string one_of_or(const std::string& fallback, const std::vector<std::string>& names) const;

  // ---- arrays ----
  std::vector<std::string> strings() const;
  std::vector<int64_t> integers(int64_t min = std::numeric_limits<int64_t>::min(),
                                int64_t max = std::numeric_limits<int64_t>::max()) const;
  std::vector<double> numbers(const NumberRange& range = {}) const;

  // ---- objects as maps (every value typed) ----
  std::map<std::string, std::string> string_map() const;
  std::map<std::string, int64_t> integer_map(int64_t min = std::numeric_limits<int64_t>::min(),
                                             int64_t max = std::numeric_limits<int64_t>::max()) const;

  // The value as compact JSON text (our own records, stored again as text: the manifest's "extra").
  std::string dump() const;

  // Throws zest::Error "<file>: field '<path>' <message>" ("<file>: <message>" for the document itself).
  [[noreturn]] void fail(const std::string& message) const;
  // "must be <what>, got <what the value is> (<excerpt>)": for a check the typed accessors do not make.
  [[noreturn]] void expected(const std::string& what) const;

 private:
  JsonField(const void* value, bool ordered, bool null_as_absent, std::string file, std::string path)
      : value_(value), ordered_(ordered), null_as_absent_(null_as_absent), file_(std::move(file)),
        path_(std::move(path)) {}
  // The value's JSON type (value_t is the same enum for both document types); requires a value.
  nlohmann::json::value_t type() const;
  // Fails "is missing (expected <what>)" when the member is absent.
  void present(const std::string& what) const;
  std::string member_path(const std::string& key) const;
  template <typename F>
  decltype(auto) visit(F&& f) const;  // f(const nlohmann::json&) or f(const nlohmann::ordered_json&)

  const void* value_;  // nullptr: a member that is absent
  bool ordered_;
  bool null_as_absent_ = false;
  std::string file_;
  std::string path_;
};

// A document with the file it came from, owning what its fields point into: root() is the JsonField of
// the whole (at `path` inside a larger file: the manifest's "extra" record is parsed again from its text).
class JsonDocument {
 public:
  JsonDocument(Json value, std::string file, std::string path = "")
      : value_(std::move(value)), file_(std::move(file)), path_(std::move(path)) {}
  JsonField root() const { return JsonField(value_, file_, path_); }
  const Json& value() const { return value_; }

 private:
  Json value_;
  std::string file_;
  std::string path_;
};

// "an integer", "a string", ... for messages.
std::string json_type_phrase(const nlohmann::json& value);
std::string json_type_phrase(const nlohmann::ordered_json& value);

// A JSON library error as a sentence: "parse error at line 3, column 7: ..." without the library's
// "[json.exception.parse_error.101]" tag.
std::string json_error_text(const std::exception& error);

}  // namespace zest
