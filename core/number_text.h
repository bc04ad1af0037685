// Numbers as people type and read them: strict reading of command-line options and environment variables,
// and memory sizes as messages print them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace zest {

// The whole of `text` as a finite number ("7000000000", "1.5e9", "0.25"), or nullopt when any of it is not
// one (empty, "12abc", "inf", "nan").
std::optional<double> number_in(const std::string& text);

// Environment variable `name` as a positive number of seconds, in milliseconds; nullopt when it is unset or
// empty. Any other value is an Error naming the variable and what it must be.
std::optional<int64_t> env_seconds_in_ms(const char* name);

// `bytes` in decimal gigabytes with one decimal, "12.3 GB": how messages and estimates state memory.
std::string gigabytes_text(int64_t bytes);

}  // namespace zest
