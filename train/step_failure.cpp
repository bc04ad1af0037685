// The out-of-memory report of a training step and the step-start test hook (see step_failure.h).
#include "train/step_failure.h"

#include "checkpoint/directory.h"
#include "core/check.h"
#include "engine/preflight.h"
#include "train/memory_budget.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <atomic>
#include <regex>
#include <sstream>

namespace zest {
namespace {

std::atomic<StepStartHook>& hook() {
  static std::atomic<StepStartHook> current{nullptr};
  return current;
}

std::string message_of(const std::exception& error) {
  if (const auto* c10_error = dynamic_cast<const c10::Error*>(&error)) return c10_error->what_without_backtrace();
  return error.what();
}

}  // namespace

void set_step_start_hook(StepStartHook h) { hook().store(h); }

void reach_step_start(int64_t step) {
  if (const StepStartHook h = hook().load()) h(step);
}

std::string describe_batch(const TensorMap& batch) {
  std::ostringstream text;
  for (const auto& [name, tensor] : batch) {
    if (text.tellp() > 0) text << ", ";
    text << name << " " << tensor.sizes();
  }
  return text.str();
}

std::string failed_allocation_size(const std::string& message) {
  static const std::regex cuda("Tried to allocate ([0-9.]+ ?[KMGTP]?i?B)");
  static const std::regex cpu("allocate ([0-9]+) bytes");
  std::smatch m;
  if (std::regex_search(message, m, cuda)) return m[1].str();
  if (std::regex_search(message, m, cpu)) return format_bytes(std::stod(m[1].str()));
  return "";
}

std::string out_of_memory_report(const std::exception& error, const StepContext& ctx) {
  const std::string what = failed_allocation_size(message_of(error));
  std::string text = str("out of memory in training step ", ctx.step, " on ", ctx.device.str(), ": ",
                         what.empty() ? std::string("an allocation") : "allocating " + what, " failed");
  if (!ctx.batch_shapes.empty()) text += " with the micro-batch " + ctx.batch_shapes;
  const DeviceMemoryInfo memory = device_memory_info(ctx.device);
  if (memory.free_bytes >= 0 && memory.total_bytes > 0)
    text += str("; the ", ctx.device.is_cuda() ? "GPU" : "host", " has ", format_bytes(static_cast<double>(memory.free_bytes)),
                " free of ", format_bytes(static_cast<double>(memory.total_bytes)));
  if (!ctx.plan.profile.units.empty()) {
    const int64_t estimate = ctx.plan.bytes();
    // The step needed more than the estimate: what fits is judged against the smaller of the budget
    // measured at start and four fifths of this batch's estimate.
    const int64_t budget = ctx.activation_budget >= 0 ? std::min(ctx.activation_budget, estimate * 4 / 5) : estimate * 4 / 5;
    text += str("; the activations were estimated at ", format_bytes(static_cast<double>(estimate)), ": ",
                memory_advice(ctx.plan, budget));
  }
  if (!ctx.checkpoint_dir.empty()) {
    const auto latest = checkpoint::find_latest(ctx.checkpoint_dir);
    text += latest ? "; the last checkpoint, " + *latest + ", is untouched" : "; no checkpoint was written";
  }
  return text;
}

}  // namespace zest
