// Activation pre-flight check and its advice (see preflight_activations.h).
#include "engine/preflight_activations.h"

#include "core/check.h"
#include "core/number_text.h"

#include <vector>

namespace zest {
namespace {

const char* quoted(CheckpointPolicy p) {
  switch (p) {
    case CheckpointPolicy::none: return "\"none\"";
    case CheckpointPolicy::all: return "\"all\"";
    case CheckpointPolicy::every_k: return "\"every_k\"";
  }
  return "?";
}

// The largest batch in [1, limit] whose activations fit `budget` under `policy` (0 when none does):
// the bytes grow with the batch, so a bisection finds it.
int64_t largest_batch(const ActivationPlan& plan, CheckpointPolicy policy, int64_t budget, int64_t limit) {
  if (plan.bytes_with(1, policy) > budget) return 0;
  int64_t lo = 1, hi = limit;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo + 1) / 2;
    if (plan.bytes_with(mid, policy) <= budget) lo = mid; else hi = mid - 1;
  }
  return lo;
}

}  // namespace

std::string memory_advice(const ActivationPlan& plan, int64_t budget) {
  std::vector<std::string> fits;
  const int64_t batch = plan.batch_size;
  const int64_t largest = largest_batch(plan, plan.policy, budget, std::max<int64_t>(1, batch - 1));
  if (largest >= 1 && largest < batch)
    fits.push_back(str("at most data.batch_size = ", largest, " fits (",
                       gigabytes_text(plan.bytes_with(largest, plan.policy)), " of activations)"));
  if (plan.policy != CheckpointPolicy::all && plan.bytes_with(batch, CheckpointPolicy::all) <= budget)
    fits.push_back(str("data.batch_size = ", batch, " fits with engine.activation_checkpointing = \"all\" (",
                       gigabytes_text(plan.bytes_with(batch, CheckpointPolicy::all)), ")"));
  // A divisor of the batch that fits, with as many more accumulation steps: the same global batch.
  for (int64_t parts = 2; parts <= batch; ++parts) {
    if (batch % parts != 0 || plan.bytes_with(batch / parts, plan.policy) > budget) continue;
    fits.push_back(str("data.batch_size = ", batch / parts, " with engine.accumulation_steps = ",
                       plan.accumulation_steps * parts, " keeps the global batch (",
                       gigabytes_text(plan.bytes_with(batch / parts, plan.policy)), ")"));
    break;
  }
  if (fits.empty()) {
    return str("even data.batch_size = 1 with engine.activation_checkpointing = \"all\" needs ",
               gigabytes_text(plan.bytes_with(1, CheckpointPolicy::all)), ": shorten the samples (data.seq_len or the "
               "resolution), use more GPUs with a higher stage, or offload the optimizer");
  }
  std::string text;
  for (const std::string& f : fits) text += (text.empty() ? "" : "; or ") + f;
  return text;
}

std::string activation_problem(const ActivationPlan& plan, int64_t free_bytes, const std::string& device_name) {
  const int64_t need = plan.bytes();
  if (need <= free_bytes) return "";
  return str("data.batch_size = ", plan.batch_size, " needs about ", gigabytes_text(need),
             " of activations per micro-batch with engine.activation_checkpointing = ", quoted(plan.policy),
             ", and this ", device_name, " has ", gigabytes_text(free_bytes), " free after the model state: ",
             memory_advice(plan, free_bytes));
}

}  // namespace zest
