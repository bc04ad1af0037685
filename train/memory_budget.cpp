// available_memory from /proc and /sys (see memory_budget.h).
#include "train/memory_budget.h"

#include <sys/resource.h>

#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>

namespace zest {
namespace {

// The value (in kB) of `key` in a /proc file of "Key:   123 kB" lines; -1 when absent.
double proc_kb(const std::string& file, const std::string& key) {
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(key + ":", 0) != 0) continue;
    std::istringstream fields(line.substr(key.size() + 1));
    double kb = -1;
    fields >> kb;
    return kb;
  }
  return -1;
}

// A number from a one-line file ("max" or unreadable → -1).
double file_number(const std::string& path) {
  std::ifstream in(path);
  double value = -1;
  if (!(in >> value)) return -1;
  return value;
}

void lower_to(MemoryBudget& budget, double bytes, const char* why, bool shared = true) {
  if (bytes >= 0 && bytes < budget.bytes) budget = {bytes, why, shared};
}

}  // namespace

MemoryBudget available_memory() {
  MemoryBudget budget{std::numeric_limits<double>::infinity(), "nothing"};
  const double available_kb = proc_kb("/proc/meminfo", "MemAvailable");
  if (available_kb >= 0) lower_to(budget, available_kb * 1024, "available memory");
  // cgroup v2, then v1 (a v1 "no limit" is a huge number, which never lowers the budget).
  const double v2_limit = file_number("/sys/fs/cgroup/memory.max");
  if (v2_limit >= 0) lower_to(budget, v2_limit - std::max(0.0, file_number("/sys/fs/cgroup/memory.current")), "the cgroup limit");
  const double v1_limit = file_number("/sys/fs/cgroup/memory/memory.limit_in_bytes");
  if (v1_limit >= 0)
    lower_to(budget, v1_limit - std::max(0.0, file_number("/sys/fs/cgroup/memory/memory.usage_in_bytes")),
             "the cgroup limit");
  struct rlimit limit {};
  if (getrlimit(RLIMIT_AS, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
    const double used_kb = std::max(0.0, proc_kb("/proc/self/status", "VmSize"));
    lower_to(budget, static_cast<double>(limit.rlim_cur) - used_kb * 1024, "ulimit -v", /*shared=*/false);
  }
  if (budget.bytes < 0) budget.bytes = 0;
  return budget;
}

std::string format_bytes(double bytes) {
  const char* units[] = {"bytes", "KB", "MB", "GB", "TB", "PB", "EB"};
  int unit = 0;
  while (bytes >= 1000.0 && unit < 6) {
    bytes /= 1000.0;
    ++unit;
  }
  char text[48];
  std::snprintf(text, sizeof(text), unit == 0 ? "%.0f %s" : "%.1f %s", bytes, units[unit]);
  return text;
}

}  // namespace zest
