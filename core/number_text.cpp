// Numbers as text (see number_text.h).
#include "core/number_text.h"

#include "core/check.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace zest {

std::optional<double> number_in(const std::string& text) {
  if (text.empty()) return std::nullopt;
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size() || !std::isfinite(value)) return std::nullopt;
  return value;
}

std::optional<int64_t> env_seconds_in_ms(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  const std::optional<double> seconds = number_in(value);
  if (!seconds || !(*seconds > 0))
    throw Error(str("environment variable ", name, "='", value, "' must be a positive number of seconds"));
  return static_cast<int64_t>(*seconds * 1000.0);
}

std::string gigabytes_text(int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f GB", static_cast<double>(bytes) / 1e9);
  return text;
}

}  // namespace zest
