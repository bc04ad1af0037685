// The run's pre-flight: model state inputs, activation plan and check (see activation_check.h).
#include "train/activation_check.h"

#include "core/check.h"
#include "core/compat.h"
#include "engine/preflight.h"
#include "models/lora_run.h"
#include "train/memory_budget.h"

#include <algorithm>

namespace zest {
namespace {

// The fused attention kernels (LibTorch 2.x on a GPU) keep a row statistic, the math path the probabilities.
bool keeps_probabilities(const torch::Device& device) {
#if ZEST_TORCH_AT_LEAST(2, 0)
  return !device.is_cuda();
#else
  (void)device;
  return true;
#endif
}

int64_t dim_of(const Sample& sample, const std::string& key, int64_t dim) {
  const auto it = sample.find(key);
  return it != sample.end() && it->second.dim() > dim ? it->second.size(dim) : 0;
}

}  // namespace

PreflightInputs run_preflight_inputs(const RunConfig& config, const ResolvedModel& model, int world_size, bool ema) {
  const ParameterCounts counts = config.lora.enabled ? count_lora_parameters(model, config.lora)
                                                     : ParameterCounts{count_model_parameters(model), 0};
  PreflightInputs in = preflight_inputs_for(counts.trainable, world_size, config.engine, config.optimizer, ema);
  in.model_state.frozen_numel = counts.frozen;
  return in;
}

ActivationShapes default_activation_shapes(Precision precision, const torch::Device& device) {
  ActivationShapes shapes;
  shapes.precision = precision;
  shapes.attention_keeps_probabilities = keeps_probabilities(device);
  return shapes;
}

ActivationShapes activation_shapes_of(const Sample& sample, Precision precision, const torch::Device& device) {
  ActivationShapes shapes = default_activation_shapes(precision, device);
  if (sample.count("x") != 0) {  // motion
    shapes.length = dim_of(sample, "x", 0);
    shapes.text_tokens = dim_of(sample, "ctxt_input", 0);
  } else {  // image latents
    shapes.length = dim_of(sample, "sample", 1);
    shapes.width = dim_of(sample, "sample", 2);
    shapes.text_tokens = dim_of(sample, "encoder_hidden_states", 0);
  }
  return shapes;
}

ActivationPlan activation_plan(const RunConfig& config, const ResolvedModel& model, const ActivationShapes& shapes) {
  ActivationPlan plan;
  if (model.family->activation_profile) {
    ConfigTable table = model_config_table(model);
    plan.profile = model.family->activation_profile(table, shapes);
  }
  plan.batch_size = config.data.batch_size;
  plan.accumulation_steps = config.engine.accumulation_steps;
  plan.policy = config.engine.activation_checkpointing;
  plan.every = config.engine.checkpoint_every;
  return plan;
}

int64_t check_activations_fit(const ActivationPlan& plan, const torch::Device& device, int ranks_on_host) {
  int64_t free_bytes = device_free_bytes(device);
  std::string where = "GPU";
  if (!device.is_cuda()) {
    const MemoryBudget budget = available_memory();
    const double share = budget.shared ? static_cast<double>(std::max(1, ranks_on_host)) : 1.0;
    free_bytes = static_cast<int64_t>(std::min(budget.bytes / share, 9e18));
    where = "host (" + budget.limited_by + (share > 1 ? str(", shared by ", ranks_on_host, " ranks") : "") + ")";
  }
  if (free_bytes < 0) return free_bytes;
  const std::string problem = activation_problem(plan, free_bytes, where);
  if (!problem.empty()) throw Error(problem);
  return free_bytes;
}

}  // namespace zest
