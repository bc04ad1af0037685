// The run's pre-flight: the model state to check before the model is built (a LoRA run's adapters beside
// its frozen base), and its activation plan: the family's activation profile for the data's shapes (one sample of the
// dataset, or the family's defaults when there is none yet), [data] batch_size and [engine] accumulation
// and recompute policy; and the check that refuses, once the model state is on the GPU, a run whose
// activations cannot fit (engine/preflight_activations.h).
#pragma once

#include "data/dataset.h"
#include "engine/preflight.h"
#include "engine/preflight_activations.h"
#include "models/model_resolve.h"
#include "train/run_config.h"

#include <torch/torch.h>

namespace zest {

// The shapes of one sample (docs/data_formats.md: motion x [frames, D] and ctxt_input [tokens, D]; images
// sample [C, H, W] and encoder_hidden_states [tokens, D]); `device` decides the attention path.
ActivationShapes activation_shapes_of(const Sample& sample, Precision precision, const torch::Device& device);
// The family's defaults (SyntheticShapes) where no dataset is at hand.
ActivationShapes default_activation_shapes(Precision precision, const torch::Device& device);

// The model state `zest train` and `zest bench` check before building the model: a LoRA run trains its
// adapters and keeps its frozen base whole in the compute dtype.
PreflightInputs run_preflight_inputs(const RunConfig& config, const ResolvedModel& model, int world_size, bool ema);

ActivationPlan activation_plan(const RunConfig& config, const ResolvedModel& model, const ActivationShapes& shapes);

// Throws zest::Error with activation_problem's text when the plan does not fit what `device` has free
// now (model state allocated; on the CPU, this process's memory budget shared by the `ranks_on_host`
// ranks there, train/memory_budget.h); returns those free bytes.
int64_t check_activations_fit(const ActivationPlan& plan, const torch::Device& device, int ranks_on_host);

}  // namespace zest
