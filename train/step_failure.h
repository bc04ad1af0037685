// What `zest train` says when memory runs out inside a training step: one message with the step, the
// batch's shapes, the allocation that failed, the device's free and total memory, and what would fit
// (engine/preflight_activations.h) — never the allocator's text or its C++ frames. Also a test hook
// called at the start of every step, through which tests inject a failure (a CUDA out-of-memory on the CPU).
#pragma once

#include "engine/preflight_activations.h"
#include "models/registry.h"

#include <torch/torch.h>

#include <cstdint>
#include <exception>
#include <string>

namespace zest {

// What the run is doing, kept up to date by the step loop for the report.
struct StepContext {
  int64_t step = 0;                      // the step running (1-based); 0 before the first
  std::string batch_shapes;              // describe_batch of the micro-batch in use
  torch::Device device = torch::kCPU;
  ActivationPlan plan;                   // no units: no estimate (the advice is left out)
  int64_t activation_budget = -1;        // bytes free after the model state at start (-1: unknown)
  std::string checkpoint_dir;            // where the last checkpoint is
};

// "x [8, 360, 201], x_mask_temporal [8, 360], ..." (names in order).
std::string describe_batch(const TensorMap& batch);

// The allocation size a LibTorch out-of-memory message names ("1.32 GiB", "1.0 GB"), or "".
std::string failed_allocation_size(const std::string& message);

// The one-message report of an out-of-memory `error` in the step `ctx` describes.
std::string out_of_memory_report(const std::exception& error, const StepContext& ctx);

// Test hook: called with the step about to run (1-based) before its first micro-batch; nullptr (the
// default, and always in production) does nothing.
using StepStartHook = void (*)(int64_t step);
void set_step_start_hook(StepStartHook hook);
void reach_step_start(int64_t step);

}  // namespace zest
