// What an optimizer's per-element update sees, shared by every path that runs it (the CPU and offloaded
// host loops in optim/host_update.cpp, the fused CUDA kernel in optim/fused_optimizer.cu): the run's
// hyper-parameters and the step's numbers in fp32, as the update computes. Compiled by g++ and nvcc.
//
// An update rule (optim/adamw.h, sgd.h, lion.h) is a struct with
//   kName                 its [optimizer] name
//   kStates[]             the names of its state tensors, each fp32 [numel] (State = float), as saved
//                         in checkpoints; at most kMaxStates
//   kKeys[]               the [optimizer] keys it reads besides lr, weight_decay and no_decay, with docs
//   kDefaultBetas         its betas when the config gives none (rules that do not read betas: unused)
//   live_states(hyper)    how many of kStates hold information (the rest cost no memory in estimates)
//   update(h, s, wd, g, p, state)
//                         one element: g is the gradient times the step's multiplier, p the fp32
//                         master value, wd the weight decay of its range (0 where excluded), state the
//                         element's state values (read and written); returns the new master value.
#pragma once

#include "core/host_device.h"
#include "engine/step_scalars.h"

#include <cstdint>

namespace zest {

// Every path keeps state in fp32 buffers; a rule's State must be float.
inline constexpr int kMaxStates = 2;

// The run's hyper-parameters (from OptimConfig), in fp32.
struct OptimHyper {
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;  // AdamW, Lion (betas)
  float weight_decay = 0.0f;                        // where decay applies
  float momentum = 0.0f;                            // SGD
  bool nesterov = false;
};

// One [optimizer] key a rule reads, with its one-line doc for printed configs.
struct HyperKey {
  const char* key;
  const char* doc;
};

// This step's numbers, in fp32, from the engine's StepScalars.
struct StepValues {
  float lr = 0.0f;
  float multiplier = 1.0f;             // applied to the reduced gradient: unscale · 1/world · clip
  float step_size = 0.0f;              // lr / (1 − β1^t): Adam's bias-corrected step
  float bias_correction2_sqrt = 1.0f;  // √(1 − β2^t)
  bool first_step = false;             // this update is the first one applied (SGD's momentum start)
};

// How many state tensors `Rule` declares (its kStates[]).
template <typename Rule>
inline constexpr int kStateCount = static_cast<int>(sizeof(Rule::kStates) / sizeof(Rule::kStates[0]));

// One element of `Rule` at index k of the state arrays s0 and s1 (those the rule declares; the others may be
// null): reads the element's state, applies the update to the fp32 master value p with the scaled gradient
// g, writes the state back and returns the new master value. Every path (host loops, the fused kernel's
// scalar and four-wide loops) updates an element through this one function.
template <typename Rule>
ZEST_HOST_DEVICE inline float update_element(const OptimHyper& h, const StepValues& s, float wd, float g, float p,
                                             float* s0, float* s1, int64_t k) {
  constexpr int kStates = kStateCount<Rule>;
  float state[kMaxStates];
  if constexpr (kStates > 0) state[0] = s0[k];
  if constexpr (kStates > 1) state[1] = s1[k];
  p = Rule::update(h, s, wd, g, p, state);
  if constexpr (kStates > 0) s0[k] = state[0];
  if constexpr (kStates > 1) s1[k] = state[1];
  return p;
}

ZEST_HOST_DEVICE inline StepValues step_values(const StepScalars& s) {
  StepValues v;
  v.lr = static_cast<float>(s.lr);
  v.multiplier = static_cast<float>(s.grad_multiplier);
  v.step_size = static_cast<float>(s.lr / s.bias_correction1);
  v.bias_correction2_sqrt = static_cast<float>(s.bias_correction2_sqrt);
  v.first_step = s.applied_steps == 1.0;
  return v;
}

}  // namespace zest
