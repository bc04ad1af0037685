// ShardingPolicy: every difference between the ZeRO stages, resolved once from [engine]: what a rank keeps
// of each kind of model state, how gradients leave backward, when parameters are gathered. The buckets'
// verbs (reduce_grads, unshard, reshard), the flat buffers, the memory model and the pre-flight check ask
// it; nothing else tests the stage number.
#pragma once

#include "core/check.h"
#include "core/element_span.h"
#include "engine/unit_layout.h"

#include <cstdint>

namespace zest {

// How a bucket's gradients leave backward.
enum class GradReduction {
  allreduce,          // stage 0: every rank keeps the full, summed gradient
  reduce_scatter,     // stage 1: reduced into the rank's slice of its per-step full gradient buffer
  reduce_scatter_to_shard,  // stages 2–3: reduced into the persistent gradient shard; full gradients are transient
};

struct ShardingPolicy {
  static constexpr int kMaxStage = 3;

  int stage = 0;
  bool shard_optimizer = false;        // master + optimizer state: own slice only (stage >= 1)
  bool shard_grads = false;            // full gradients live only until reduced (stage >= 2)
  bool shard_params = false;           // parameters sharded at rest, gathered per unit (stage 3)
  bool reshard_after_forward = true;   // stage 3: free a unit's gathered parameters after its forward

  static bool is_stage(int stage) { return stage >= 0 && stage <= kMaxStage; }
  // With one rank a gradient shard is the whole gradient: at stages 2 and 3 the gradients then stay in the
  // per-step full buffers autograd accumulates into (stage 1's way), which saves the buckets' transient
  // buffers, their zero fill and the copy that a one-rank reduce-scatter is, at the same memory.
  static ShardingPolicy for_stage(int stage, int world_size, bool reshard_after_forward = true) {
    ZEST_CHECK(is_stage(stage), "ZeRO stage ", stage, " is not supported (0, 1, 2 or 3)");
    const bool shard_grads = stage >= 2 && world_size > 1;
    return {stage, stage >= 1, shard_grads, stage >= 3, reshard_after_forward};
  }

  // ---- what a rank owns and keeps ----
  // The part of a unit this rank updates (master, optimizer state): its slice, or the whole unit at stage 0.
  ElementSpan owned(const UnitLayout& layout, int rank) const {
    return shard_optimizer ? layout.slice(rank) : ElementSpan{0, layout.padded_numel};
  }
  // Stage 0 owns whole units: its gradients need no reduction of their norm, and its update rewrites the
  // whole parameter buffer.
  bool owns_whole_units() const { return !shard_optimizer; }
  // Optimizer offload moves the owned master and optimizer state to the host: it needs them sharded.
  bool can_offload_optimizer() const { return shard_optimizer; }
  // Stage 3 keeps a compute-dtype parameter shard at rest only where the master is in host memory (optimizer
  // offload uploads the updated parameters into it); otherwise a gather casts the rank's master slice into its
  // own slot of the gathered buffer and gathers in place, as FSDP2 casts its float32 shard: no 16-bit copy of
  // the parameters lives between uses.
  bool keeps_param_shard(bool master_on_host) const { return shard_params && master_on_host; }
  // Of model state that takes `full` bytes for the whole model, what one of `world_size` ranks keeps.
  int64_t param_bytes_kept(int64_t full, int world_size, bool master_on_host) const {
    if (!shard_params) return full;
    return keeps_param_shard(master_on_host) ? full / world_size : 0;
  }
  int64_t grad_bytes_kept(int64_t full, int world_size) const { return shard_grads ? full / world_size : full; }
  // The fp32 master, the optimizer state and the EMA (kept like the master).
  int64_t optimizer_bytes_kept(int64_t full, int world_size) const {
    return shard_optimizer ? full / world_size : full;
  }

  // ---- gradients ----
  GradReduction grad_reduction() const {
    if (shard_grads) return GradReduction::reduce_scatter_to_shard;
    return shard_optimizer ? GradReduction::reduce_scatter : GradReduction::allreduce;
  }
  // Full gradients exist only from a bucket's first gradient to its reduction (stages 2–3, more than one
  // rank at stage 2): the buckets' transient buffers.
  bool has_transient_grads() const { return shard_grads; }
  // Stages 0/1 accumulate micro-batches in the per-step full buffers and communicate once per step;
  // stages 2/3 keep only the shard, so they reduce every micro-step (and add into the shard after the first).
  bool reduces_every_micro_step() const { return shard_grads; }

  // ---- parameters ----
  // Stage 3 gathers a bucket's parameters just before its units run and frees them afterwards.
  bool gathers_per_unit() const { return shard_params; }
  bool reshards_after_forward() const { return shard_params && reshard_after_forward; }
  // Stages 1/2 allgather the updated parameter shards after each step (stage 3 gathers on demand).
  bool gathers_after_step() const { return shard_optimizer && !shard_params; }
};

}  // namespace zest
