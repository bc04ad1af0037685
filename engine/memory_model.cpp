// Model-state memory formulas (see memory_model.h).
#include "engine/memory_model.h"

#include "core/check.h"
#include "engine/sharding_policy.h"
#include "optim/staging_ring.h"

namespace zest {

int64_t dtype_bytes(Precision p) { return p == Precision::fp32 ? 4 : 2; }

ModelStateBytes estimate_model_state_bytes(const MemoryModelInputs& in) {
  ZEST_CHECK(in.world_size >= 1, "world size must be >= 1");
  const ShardingPolicy policy = ShardingPolicy::for_stage(in.stage, in.world_size);
  const int64_t P = in.numel;
  const int N = in.world_size;
  const int64_t c = dtype_bytes(in.precision);
  ModelStateBytes bytes;
  bytes.params = policy.param_bytes_kept(P * c, N, in.offload_optimizer);
  // Gradients live in the reduce dtype from autograd's accumulation on.
  const int64_t r = dtype_bytes(in.reduce_dtype);
  // Per-step full gradients (no sharded gradients: stages 0–1, or one rank) go bucket by bucket in backward.
  const bool grads_go_in_backward = in.optimizer_in_backward && !policy.has_transient_grads();
  bytes.grads = grads_go_in_backward ? 0 : policy.grad_bytes_kept(P * r, N);
  bytes.master = policy.optimizer_bytes_kept(4 * P, N);
  bytes.optimizer = policy.optimizer_bytes_kept(in.optimizer_bytes_per_element * P, N);
  bytes.ema = in.ema ? bytes.master : 0;  // kept sharded exactly like the master
  bytes.frozen = in.frozen_numel * c;     // the engine casts frozen parameters to the compute dtype
  if (in.offload_optimizer) {
    ZEST_CHECK(policy.can_offload_optimizer(), "optimizer offload needs stage 1, 2 or 3");
    bytes.offloaded = true;
    bytes.staging = kStagingSlots * staging_slot_numel(in.offload_staging_bytes, r + c, (P + N - 1) / N) * (r + c);
  }
  return bytes;
}

}  // namespace zest
