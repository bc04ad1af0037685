// Process-wide collective timeout (see collective_timeout.h).
#include "comm/collective_timeout.h"

#include "core/check.h"
#include "core/number_text.h"

#include <atomic>
#include <cstdlib>

namespace zest {
namespace {

std::atomic<int64_t>& collective_timeout_ms() {
  static std::atomic<int64_t> ms{600'000};
  return ms;
}

// ZEST_COMM_TIMEOUT_S in milliseconds, or -1 when unset.
int64_t env_timeout_ms() {
  return env_seconds_in_ms("ZEST_COMM_TIMEOUT_S").value_or(-1);
}

}  // namespace

std::chrono::milliseconds collective_timeout() {
  const int64_t env = env_timeout_ms();
  return std::chrono::milliseconds(env > 0 ? env : collective_timeout_ms().load());
}

void set_collective_timeout(double seconds) {
  ZEST_CHECK(seconds > 0, "collective timeout must be > 0 seconds, got ", seconds);
  collective_timeout_ms() = static_cast<int64_t>(seconds * 1000.0);
}

namespace {
thread_local std::string current_label;
std::atomic<int64_t> current_step{0};
}  // namespace

CollectiveLabel::CollectiveLabel(std::string label) : previous_(std::move(current_label)) {
  current_label = std::move(label);
}
CollectiveLabel::~CollectiveLabel() { current_label = std::move(previous_); }
const std::string& CollectiveLabel::current() { return current_label; }

void set_collective_step(int64_t step) { current_step = step; }
int64_t collective_step() { return current_step.load(); }

}  // namespace zest
