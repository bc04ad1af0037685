// Typed JSON access with path-naming errors (see json_field.h).
#include "formats/json_field.h"

#include "core/check.h"
#include "formats/json_text.h"

#include <cmath>

namespace zest {
namespace {

// " >= 0", " in [1, 4]", or "" for a bound that is only the C++ type's (int or int64).
std::string range_phrase(int64_t min, int64_t max) {
  const bool no_min = min <= std::numeric_limits<int>::min();
  const bool no_max = max >= std::numeric_limits<int>::max();
  if (no_min && no_max) return "";
  if (no_max) return " >= " + std::to_string(min);
  if (no_min) return " <= " + std::to_string(max);
  return " in [" + std::to_string(min) + ", " + std::to_string(max) + "]";
}

// A short excerpt of the offending value, so the message shows what was found (escaped, bounded).
std::string excerpt(const Json& value) { return json_excerpt(value, 40); }

}  // namespace

std::string json_type_phrase(const Json& value) {
  switch (value.type()) {
    case Json::value_t::null: return "null";
    case Json::value_t::boolean: return "a boolean";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned: return "an integer";
    case Json::value_t::number_float: return "a number with a fraction";
    case Json::value_t::string: return "a string";
    case Json::value_t::array: return "an array";
    case Json::value_t::object: return "an object";
    default: return "an unsupported value";
  }
}

std::string json_error_text(const std::exception& error) {
  std::string text = error.what();
  if (text.rfind("[json.exception.", 0) == 0) {
    const size_t end = text.find("] ");
    if (end != std::string::npos) text.erase(0, end + 2);
  }
  return text;
}

void JsonField::fail(const std::string& message) const {
  if (path_.empty()) ZEST_FAIL(file_, ": ", message);
  ZEST_FAIL(file_, ": field '", path_, "' ", message);
}

void JsonField::expected(const std::string& what) const {
  const Json& value = *value_;
  const bool scalar = !value.is_object() && !value.is_array();
  fail("must be " + what + ", got " + json_type_phrase(value) + (scalar ? " (" + excerpt(value) + ")" : ""));
}

const Json& JsonField::present(const std::string& what) const {
  if (value_ == nullptr) fail("is missing (expected " + what + ")");
  return *value_;
}

bool JsonField::has(const std::string& key) const {
  return value_ != nullptr && value_->is_object() && value_->contains(key);
}

JsonField JsonField::at(const std::string& key) const {
  const Json& value = present("an object");
  if (!value.is_object()) expected("an object");
  const std::string path = path_.empty() ? key : path_ + "." + key;
  const auto it = value.find(key);
  return JsonField(it == value.end() ? nullptr : &*it, file_, path);
}

std::vector<JsonField> JsonField::items() const {
  const Json& value = present("an array");
  if (!value.is_array()) expected("an array");
  std::vector<JsonField> out;
  for (size_t i = 0; i < value.size(); ++i)
    out.push_back(JsonField(&value[i], file_, path_ + "[" + std::to_string(i) + "]"));
  return out;
}

int64_t JsonField::integer(int64_t min, int64_t max) const {
  const std::string what = "an integer" + range_phrase(min, max);
  const Json& value = present(what);
  // Unsigned values above INT64_MAX are out of every range we accept; floats (even 3.0) are not integers.
  if (value.is_number_unsigned() && value.get<uint64_t>() > static_cast<uint64_t>(max)) expected(what);
  if (!value.is_number_integer()) expected(what);
  const auto result = value.get<int64_t>();
  if (result < min || result > max) expected(what);
  return result;
}

double JsonField::number() const {
  const Json& value = present("a finite number");
  if (!value.is_number()) expected("a finite number");
  const auto result = value.get<double>();
  if (!std::isfinite(result)) expected("a finite number");
  return result;
}

bool JsonField::boolean() const {
  const Json& value = present("true or false");
  if (!value.is_boolean()) expected("true or false");
  return value.get<bool>();
}

std::string JsonField::string() const {
  const Json& value = present("a string");
  if (!value.is_string()) expected("a string");
  return value.get<std::string>();
}

std::vector<std::string> JsonField::strings() const {
  const Json& value = present("an array of strings");
  if (!value.is_array()) expected("an array of strings");
  std::vector<std::string> out;
  for (const JsonField& item : items()) out.push_back(item.string());
  return out;
}

std::vector<int64_t> JsonField::integers(int64_t min) const {
  const std::string what = "an array of integers" + range_phrase(min, std::numeric_limits<int64_t>::max());
  const Json& value = present(what);
  if (!value.is_array()) expected(what);
  std::vector<int64_t> out;
  for (const JsonField& item : items()) out.push_back(item.integer(min));
  return out;
}

const Json& JsonField::object() const {
  const Json& value = present("an object");
  if (!value.is_object()) expected("an object");
  return value;
}

}  // namespace zest
