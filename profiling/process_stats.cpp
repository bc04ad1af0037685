// The process's clock and resident set (see process_stats.h).
#include "profiling/process_stats.h"

#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>

namespace zest {

double now_seconds() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

int64_t peak_memory_bytes() {
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

int64_t resident_memory_bytes() {
  std::FILE* statm = std::fopen("/proc/self/statm", "r");
  if (statm == nullptr) return peak_memory_bytes();
  long long pages_total = 0, pages_resident = 0;
  const int read = std::fscanf(statm, "%lld %lld", &pages_total, &pages_resident);
  std::fclose(statm);
  if (read != 2) return peak_memory_bytes();
  return static_cast<int64_t>(pages_resident) * ::sysconf(_SC_PAGESIZE);
}

}  // namespace zest
