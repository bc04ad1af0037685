// The pre-flight check of activation memory: once the model state is on the device, the activations of
// one micro-batch (a family's profile for the data's shapes, the batch size and the recompute policy)
// are compared with what the device has left, and a run that cannot fit is refused with what would: the
// largest batch, the same batch with every unit checkpointed, or a smaller batch with more accumulation
// steps keeping the global batch. The same advice ends an out-of-memory report (train/step_failure.h).
#pragma once

#include "engine/activation_memory.h"

#include <cstdint>
#include <string>

namespace zest {

struct ActivationPlan {
  ActivationProfile profile;
  int64_t batch_size = 1;  // data.batch_size: samples per micro-batch and rank
  int accumulation_steps = 1;
  CheckpointPolicy policy = CheckpointPolicy::none;
  int every = 2;           // engine.checkpoint_every (every_k)

  int64_t bytes() const { return activation_bytes(profile, batch_size, policy, every); }
  int64_t bytes_with(int64_t batch, CheckpointPolicy p) const { return activation_bytes(profile, batch, p, every); }
};

// What fits in `budget` bytes of activations: "at most data.batch_size = B fits", "data.batch_size = B
// with engine.activation_checkpointing = \"all\" needs X", "data.batch_size = b with
// engine.accumulation_steps = a keeps the global batch" — those that do, joined by "; or ". When none
// does, says that even one sample with every unit checkpointed needs more.
std::string memory_advice(const ActivationPlan& plan, int64_t budget);

// "" when the plan's activations fit in `free_bytes`, else the refusal: the activations of the batch,
// the policy, what the device has free after the model state, and memory_advice.
std::string activation_problem(const ActivationPlan& plan, int64_t free_bytes, const std::string& device_name);

}  // namespace zest
