// JsonField: typed, checked access to one value of a parsed JSON document (the checkpoint manifest),
// and the JSON library's errors as sentences (also for safetensors headers). Every error names the file,
// the value's path and what was expected, e.g.
// "DIR/manifest.json: units[2].params[0].shape: expected an array of integers >= 0, got a string".
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace zest {

using Json = nlohmann::ordered_json;  // keeps member order: the manifest checksum hashes it as written

class JsonField {
 public:
  // The document itself: path "" (errors then name the file only).
  JsonField(const Json& value, std::string file) : value_(&value), file_(std::move(file)) {}

  const std::string& path() const { return path_; }
  const Json& json() const { return present("a value"); }

  // Members and elements. at() requires an object; a missing member is reported by the accessor called
  // on it (which knows what was expected). items() requires an array.
  bool has(const std::string& key) const;
  JsonField at(const std::string& key) const;
  std::vector<JsonField> items() const;

  // Scalars, each required to have exactly that JSON type and to lie in range.
  int64_t integer(int64_t min = std::numeric_limits<int64_t>::min(),
                  int64_t max = std::numeric_limits<int64_t>::max()) const;
  int to_int(int min = std::numeric_limits<int>::min(), int max = std::numeric_limits<int>::max()) const {
    return static_cast<int>(integer(min, max));
  }
  double number() const;  // an integer or a float, finite
  bool boolean() const;
  std::string string() const;
  std::vector<std::string> strings() const;
  std::vector<int64_t> integers(int64_t min = std::numeric_limits<int64_t>::min()) const;
  const Json& object() const;  // requires a JSON object

  // Throws zest::Error "<file>: field '<path>' <message>".
  [[noreturn]] void fail(const std::string& message) const;

 private:
  JsonField(const Json* value, std::string file, std::string path)
      : value_(value), file_(std::move(file)), path_(std::move(path)) {}
  // The value, or "is missing (expected <what>)" when the member is absent.
  const Json& present(const std::string& what) const;
  // "must be <what>, got <actual>".
  [[noreturn]] void expected(const std::string& what) const;

  const Json* value_;  // nullptr: a member that is absent
  std::string file_;
  std::string path_;
};

// "an integer", "a string", ... for messages.
std::string json_type_phrase(const Json& value);

// A JSON library error as a sentence: "parse error at line 3, column 7: ..." without the library's
// "[json.exception.parse_error.101]" tag.
std::string json_error_text(const std::exception& error);

}  // namespace zest
