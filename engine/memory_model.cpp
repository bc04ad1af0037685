// Model-state memory formulas (see memory_model.h).
#include "engine/memory_model.h"

#include "core/check.h"
#include "optim/staging_ring.h"

namespace zest {

int64_t dtype_bytes(Precision p) { return p == Precision::fp32 ? 4 : 2; }

ModelStateBytes estimate_model_state_bytes(const MemoryModelInputs& in) {
  ZEST_CHECK(in.stage >= 0 && in.stage <= 3, "stage ", in.stage, " is not one of 0, 1, 2, 3");
  ZEST_CHECK(in.world_size >= 1, "world size must be >= 1");
  const int64_t P = in.numel;
  const int64_t N = in.world_size;
  const int64_t c = dtype_bytes(in.precision);
  ModelStateBytes bytes;
  bytes.params = in.stage == 3 ? P * c / N : P * c;
  // Gradients live in the reduce dtype from autograd's accumulation on: the full buffer at stages 0–1,
  // the shard at 2–3.
  const int64_t r = dtype_bytes(in.reduce_dtype);
  bytes.grads = in.stage <= 1 ? P * r : P * r / N;
  bytes.master = in.stage == 0 ? 4 * P : 4 * P / N;
  bytes.optimizer = in.stage == 0 ? in.optimizer_bytes_per_element * P
                                  : in.optimizer_bytes_per_element * P / N;
  bytes.ema = in.ema ? bytes.master : 0;  // kept sharded exactly like the master
  if (in.offload_optimizer) {
    ZEST_CHECK(in.stage >= 1, "optimizer offload needs stage 1, 2 or 3");
    bytes.offloaded = true;
    bytes.staging = kStagingSlots * staging_slot_numel(in.offload_staging_bytes, r + c, (P + N - 1) / N) * (r + c);
  }
  return bytes;
}

}  // namespace zest
