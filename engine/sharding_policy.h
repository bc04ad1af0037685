// ShardingPolicy: what a ZeRO stage shards, resolved once from engine.stage; units and the engine
// consult these flags instead of re-testing the stage number.
#pragma once

#include "core/check.h"

namespace zest {

struct ShardingPolicy {
  bool shard_optimizer = false;  // master + optimizer state: own slice only (stage ≥ 1)
  bool shard_grads = false;      // gradients reduce-scattered every micro-step, own slice kept (≥ 2)
  bool shard_params = false;     // parameters sharded at rest (stage 3)

  static ShardingPolicy for_stage(int stage) {
    ZEST_CHECK(stage >= 0 && stage <= 2, "ZeRO stage ", stage, " is not supported (0, 1 or 2)");
    return {stage >= 1, stage >= 2, stage >= 3};
  }
};

}  // namespace zest
