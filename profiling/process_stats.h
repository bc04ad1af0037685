// This process's own figures, read from the host: a steady clock in seconds, and the resident set
// size at its peak (getrusage) and now (/proc/self/statm). The training loop's progress records, `zest
// bench`'s step times and device_memory.h's CPU peak read them.
#pragma once

#include <cstdint>

namespace zest {

int64_t peak_memory_bytes();
int64_t resident_memory_bytes();
double now_seconds();

}  // namespace zest
