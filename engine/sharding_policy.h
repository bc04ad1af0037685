// ShardingPolicy: what a ZeRO stage shards and keeps, resolved once from [engine]. The buckets consult it
// in their verbs (reduce_grads, unshard, reshard); nothing else re-tests the stage number.
#pragma once

#include "core/check.h"

namespace zest {

// How a bucket's gradients leave backward.
enum class GradReduction {
  allreduce,          // stage 0: every rank keeps the full, summed gradient
  reduce_scatter,     // stage 1: reduced into the rank's slice of the persistent full gradient buffer
  reduce_scatter_to_shard,  // stages 2–3: reduced into the persistent gradient shard; full gradients are transient
};

struct ShardingPolicy {
  int stage = 0;
  bool shard_optimizer = false;        // master + optimizer state: own slice only (stage >= 1)
  bool shard_grads = false;            // full gradients live only until reduced (stage >= 2)
  bool shard_params = false;           // parameters sharded at rest, gathered per unit (stage 3)
  bool reshard_after_forward = true;   // stage 3: free a unit's gathered parameters after its forward

  // With one rank a stage-2 gradient shard is the whole gradient: the gradients then stay in the
  // persistent buffer autograd accumulates into (stage 1's way), which saves a transient buffer's zero
  // fill and the copy that a one-rank reduce-scatter is, at the same memory. Stage 3 keeps its own path.
  static ShardingPolicy for_stage(int stage, int world_size, bool reshard_after_forward = true) {
    ZEST_CHECK(stage >= 0 && stage <= 3, "ZeRO stage ", stage, " is not supported (0, 1, 2 or 3)");
    const bool shard_grads = stage >= 3 || (stage == 2 && world_size > 1);
    return {stage, stage >= 1, shard_grads, stage >= 3, reshard_after_forward};
  }

  GradReduction grad_reduction() const {
    if (shard_grads) return GradReduction::reduce_scatter_to_shard;
    return shard_optimizer ? GradReduction::reduce_scatter : GradReduction::allreduce;
  }
  // Stages 0/1 accumulate micro-batches in the persistent full buffer and communicate once per step;
  // stages 2/3 keep only the shard, so they reduce every micro-step.
  bool reduces_every_micro_step() const { return shard_grads; }
  // Stages 1/2 allgather the updated parameter shards after each step (stage 3 gathers on demand).
  bool gathers_after_step() const { return shard_optimizer && !shard_params; }
};

}  // namespace zest
