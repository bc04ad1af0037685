// How much memory this process can still allocate, for the checks that refuse a run whose inputs
// cannot fit before anything is allocated: the least of the machine's available memory, the cgroup's
// limit and the address-space limit (ulimit -v).
#pragma once

#include <cstdint>
#include <string>

namespace zest {

struct MemoryBudget {
  double bytes = 0.0;
  std::string limited_by;  // "available memory", "the cgroup limit", "ulimit -v"
  bool shared = true;      // the machine's or cgroup's memory, shared with the other ranks there (not ulimit -v)
};

MemoryBudget available_memory();

// "4.8 GB" (decimal units, as `zest estimate` prints).
std::string format_bytes(double bytes);

}  // namespace zest
