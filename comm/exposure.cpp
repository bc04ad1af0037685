// Process-wide exposed-communication accounting (see exposure.h).
#include "comm/exposure.h"

#include <atomic>
#include <mutex>
#include <vector>

namespace zest {
namespace {

struct Exposure {
  std::atomic<bool> on{false};
  std::mutex mutex;
  double host_ms = 0.0;
  std::vector<std::function<double()>> device_waits;
};

Exposure& exposure() {
  static Exposure e;
  return e;
}

}  // namespace

void start_exposure_timing() {
  Exposure& e = exposure();
  std::lock_guard<std::mutex> lock(e.mutex);
  e.host_ms = 0.0;
  e.device_waits.clear();
  e.on = true;
}

bool is_exposure_timing() { return exposure().on.load(std::memory_order_relaxed); }

double stop_exposure_timing_ms() {
  Exposure& e = exposure();
  std::lock_guard<std::mutex> lock(e.mutex);
  e.on = false;
  double total = e.host_ms;
  for (const auto& resolve : e.device_waits) total += resolve();
  e.device_waits.clear();
  return total;
}

void add_host_wait_ms(double ms) {
  Exposure& e = exposure();
  std::lock_guard<std::mutex> lock(e.mutex);
  if (e.on) e.host_ms += ms;
}

void add_device_wait(std::function<double()> resolve) {
  Exposure& e = exposure();
  std::lock_guard<std::mutex> lock(e.mutex);
  if (e.on) e.device_waits.push_back(std::move(resolve));
}

}  // namespace zest
