// Typed JSON access with path-naming errors (see json_field.h).
#include "formats/json_field.h"

#include "core/check.h"
#include "core/untrusted_file.h"
#include "formats/json_text.h"

#include <cmath>
#include <sstream>

namespace zest {
namespace {

// " >= 0", " in [1, 4]", or "" for a bound that is only int64's.
std::string range_phrase(int64_t min, int64_t max) {
  const bool no_min = min == std::numeric_limits<int64_t>::min();
  const bool no_max = max == std::numeric_limits<int64_t>::max();
  if (no_min && no_max) return "";
  if (no_max) return " >= " + std::to_string(min);
  if (no_min) return " <= " + std::to_string(max);
  return " in [" + std::to_string(min) + ", " + std::to_string(max) + "]";
}

std::string number_text(double value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

template <typename J>
std::string type_phrase(const J& value) {
  switch (value.type()) {
    case J::value_t::null: return "null";
    case J::value_t::boolean: return "a boolean";
    case J::value_t::number_integer:
    case J::value_t::number_unsigned: return "an integer";
    case J::value_t::number_float: return "a number with a fraction";
    case J::value_t::string: return "a string";
    case J::value_t::array: return "an array";
    case J::value_t::object: return "an object";
    default: return "an unsupported value";
  }
}

// A member's name in a path: "a.b" for plain names, "a[\"Ġthe\"]" for any other (escaped, cut).
bool is_plain_name(const std::string& key) {
  if (key.empty() || key.size() > 64) return false;
  for (const char c : key) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

using Type = nlohmann::json::value_t;

}  // namespace

bool NumberRange::contains(double value) const {
  const bool above = min_open ? value > min : value >= min;
  const bool below = max_open ? value < max : value <= max;
  return above && below;
}

std::string NumberRange::phrase() const {
  const bool no_min = std::isinf(min) && min < 0;
  const bool no_max = std::isinf(max) && max > 0;
  if (no_min && no_max) return "";
  if (no_max) return (min_open ? " > " : " >= ") + number_text(min);
  if (no_min) return (max_open ? " < " : " <= ") + number_text(max);
  return std::string(" in ") + (min_open ? "(" : "[") + number_text(min) + ", " + number_text(max) +
         (max_open ? ")" : "]");
}

std::string json_type_phrase(const nlohmann::json& value) { return type_phrase(value); }
std::string json_type_phrase(const nlohmann::ordered_json& value) { return type_phrase(value); }

std::string json_error_text(const std::exception& error) {
  std::string text = error.what();
  if (text.rfind("[json.exception.", 0) == 0) {
    const size_t end = text.find("] ");
    if (end != std::string::npos) text.erase(0, end + 2);
  }
  return text;
}

template <typename F>
decltype(auto) JsonField::visit(F&& f) const {
  if (ordered_) return f(*static_cast<const nlohmann::ordered_json*>(value_));
  return f(*static_cast<const nlohmann::json*>(value_));
}

Type JsonField::type() const {
  return visit([](const auto& v) { return static_cast<Type>(v.type()); });
}

JsonField JsonField::null_as_absent() const {
  JsonField out = *this;
  out.null_as_absent_ = true;
  return out;
}

void JsonField::fail(const std::string& message) const {
  if (path_.empty()) ZEST_FAIL(file_, ": ", message);
  ZEST_FAIL(file_, ": field '", path_, "' ", message);
}

void JsonField::expected(const std::string& what) const {
  if (value_ == nullptr) fail("is missing (expected " + what + ")");
  const auto [phrase, shown] = visit([](const auto& v) {
    const bool scalar = !v.is_object() && !v.is_array();
    return std::pair{type_phrase(v), scalar ? " (" + json_excerpt(v, 40) + ")" : std::string()};
  });
  fail("must be " + what + ", got " + phrase + shown);
}

void JsonField::present(const std::string& what) const {
  if (value_ == nullptr) fail("is missing (expected " + what + ")");
}

std::string JsonField::member_path(const std::string& key) const {
  const std::string name = is_plain_name(key) ? key : "[\"" + printable(key, 60) + "\"]";
  if (path_.empty() || name[0] == '[') return path_ + name;
  return path_ + "." + name;
}

bool JsonField::exists() const { return value_ != nullptr && !(null_as_absent_ && type() == Type::null); }
bool JsonField::is_null() const { return value_ != nullptr && type() == Type::null; }
bool JsonField::is_boolean() const { return value_ != nullptr && type() == Type::boolean; }
bool JsonField::is_integer() const {
  return value_ != nullptr && (type() == Type::number_integer || type() == Type::number_unsigned);
}
bool JsonField::is_number() const { return is_integer() || (value_ != nullptr && type() == Type::number_float); }
bool JsonField::is_string() const { return value_ != nullptr && type() == Type::string; }
bool JsonField::is_array() const { return value_ != nullptr && type() == Type::array; }
bool JsonField::is_object() const { return value_ != nullptr && type() == Type::object; }

bool JsonField::has(const std::string& key) const { return is_object() && at(key).exists(); }

JsonField JsonField::at(const std::string& key) const {
  object();
  const void* member = visit([&](const auto& v) -> const void* {
    const auto it = v.find(key);
    return it == v.end() ? nullptr : &*it;
  });
  return JsonField(member, ordered_, null_as_absent_, file_, member_path(key));
}

std::vector<JsonField> JsonField::items() const {
  present("an array");
  if (!is_array()) expected("an array");
  std::vector<JsonField> out;
  visit([&](const auto& v) {
    out.reserve(v.size());
    for (size_t i = 0; i < v.size(); ++i)
      out.push_back(JsonField(&v[i], ordered_, null_as_absent_, file_, path_ + "[" + std::to_string(i) + "]"));
  });
  return out;
}

std::vector<std::pair<std::string, JsonField>> JsonField::members() const {
  object();
  std::vector<std::pair<std::string, JsonField>> out;
  visit([&](const auto& v) {
    out.reserve(v.size());
    for (auto it = v.begin(); it != v.end(); ++it)
      out.emplace_back(it.key(), JsonField(&it.value(), ordered_, null_as_absent_, file_, member_path(it.key())));
  });
  return out;
}

size_t JsonField::size() const {
  present("an array or an object");
  if (!is_array() && !is_object()) expected("an array or an object");
  return visit([](const auto& v) { return v.size(); });
}

const JsonField& JsonField::object() const {
  present("an object");
  if (!is_object()) expected("an object");
  return *this;
}

int64_t JsonField::integer(int64_t min, int64_t max) const {
  const std::string what = "an integer" + range_phrase(min, max);
  present(what);
  // Unsigned values above INT64_MAX are out of every range we accept; floats (even 3.0) are not integers.
  if (!is_integer()) expected(what);
  const bool too_large = visit([&](const auto& v) {
    return v.is_number_unsigned() && v.template get<uint64_t>() > static_cast<uint64_t>(max);
  });
  if (too_large) expected(what);
  const int64_t result = visit([](const auto& v) { return v.template get<int64_t>(); });
  if (result < min || result > max) expected(what);
  return result;
}

int JsonField::to_int(int min, int max) const {
  constexpr int64_t kLowest = std::numeric_limits<int64_t>::min(), kHighest = std::numeric_limits<int64_t>::max();
  const int64_t value = integer(min == std::numeric_limits<int>::min() ? kLowest : min,
                                max == std::numeric_limits<int>::max() ? kHighest : max);
  if (value < std::numeric_limits<int>::min() || value > std::numeric_limits<int>::max())
    expected("an integer" + range_phrase(min == std::numeric_limits<int>::min() ? kLowest : min,
                                         max == std::numeric_limits<int>::max() ? kHighest : max) +
             " that fits an int");
  return static_cast<int>(value);
}

double JsonField::number(const NumberRange& range) const {
  const std::string what = "a finite number" + range.phrase();
  present(what);
  if (!is_number()) expected(what);
  const double result = visit([](const auto& v) { return v.template get<double>(); });
  if (!std::isfinite(result) || !range.contains(result)) expected(what);
  return result;
}

bool JsonField::boolean() const {
  present("true or false");
  if (!is_boolean()) expected("true or false");
  return visit([](const auto& v) { return v.template get<bool>(); });
}

std::string JsonField::string() const {
  present("a string");
  if (!is_string()) expected("a string");
  return visit([](const auto& v) { return v.template get<std::string>(); });
}

std::string JsonField::one_of(const std::vector<std::string>& names) const {
  std::string what;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) what += i + 1 == names.size() ? " or " : ", ";
    what += "\"" + printable(names[i], 60) + "\"";
  }
  what = names.size() == 1 ? what : "one of " + what;
  present(what);
  if (!is_string()) expected(what);
  const std::string name = string();
  for (const std::string& n : names)
    if (n == name) return name;
  expected(what);
}

int64_t JsonField::integer_or(int64_t fallback, int64_t min, int64_t max) const {
  return exists() ? integer(min, max) : fallback;
}

double JsonField::number_or(double fallback, const NumberRange& range) const {
  return exists() ? number(range) : fallback;
}

bool JsonField::boolean_or(bool fallback) const { return exists() ? boolean() : fallback; }

std::string JsonField::string_or(const std::string& fallback) const { return exists() ? string() : fallback; }

std::string JsonField::one_of_or(const std::string& fallback, const std::vector<std::string>& names) const {
  return exists() ? one_of(names) : fallback;
}

std::vector<std::string> JsonField::strings() const {
  present("an array of strings");
  if (!is_array()) expected("an array of strings");
  std::vector<std::string> out;
  for (const JsonField& item : items()) out.push_back(item.string());
  return out;
}

std::vector<int64_t> JsonField::integers(int64_t min, int64_t max) const {
  const std::string what = "an array of integers" + range_phrase(min, max);
  present(what);
  if (!is_array()) expected(what);
  std::vector<int64_t> out;
  for (const JsonField& item : items()) out.push_back(item.integer(min, max));
  return out;
}

std::vector<double> JsonField::numbers(const NumberRange& range) const {
  const std::string what = "an array of finite numbers" + range.phrase();
  present(what);
  if (!is_array()) expected(what);
  std::vector<double> out;
  for (const JsonField& item : items()) out.push_back(item.number(range));
  return out;
}

std::map<std::string, std::string> JsonField::string_map() const {
  present("an object of strings");
  if (!is_object()) expected("an object of strings");
  std::map<std::string, std::string> out;
  for (const auto& [key, value] : members()) out[key] = value.string();
  return out;
}

std::map<std::string, int64_t> JsonField::integer_map(int64_t min, int64_t max) const {
  const std::string what = "an object of integers" + range_phrase(min, max);
  present(what);
  if (!is_object()) expected(what);
  std::map<std::string, int64_t> out;
  for (const auto& [key, value] : members()) out[key] = value.integer(min, max);
  return out;
}

std::string JsonField::dump() const {
  present("a value");
  return visit([](const auto& v) { return v.dump(); });
}

}  // namespace zest
