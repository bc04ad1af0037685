// A process-wide on/off switch for an implementation choice (a fused kernel, a recompute), read once
// from an environment variable so benchmarks can compare both sides without rebuilding, and set by tests.
#pragma once

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace zest {

class EnvSwitch {
 public:
  // Unset or empty: `default_on`; "0": off; any other value: on.
  EnvSwitch(const char* variable, bool default_on) : on_(read(variable, default_on)) {}

  bool enabled() const { return on_.load(); }
  void set(bool on) { on_.store(on); }

 private:
  static bool read(const char* variable, bool default_on) {
    const char* value = std::getenv(variable);
    if (value == nullptr || *value == '\0') return default_on;
    return std::strcmp(value, "0") != 0;
  }

  std::atomic<bool> on_;
};

}  // namespace zest
