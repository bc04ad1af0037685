// The fused CUDA optimizer pass, without LibTorch (nvcc compiles it): one kernel launch updates every
// chunk of the rank's flat shard with the configured update rule (optim/optimizers.h) — the decay mask
// folded in per chunk, the step's numbers read from the StepScalars on the device (a skipped step returns
// at once) — and writes the updated values in the compute dtype to the parameter shard in the same pass.
#pragma once

#include "optim/optimizers.h"

#include <cstdint>

namespace zest {

// A run of at most kFusedChunkNumel elements with one decay flag, inside one segment.
struct FusedChunk {
  int64_t state_offset = 0;  // index into the master and the state tensors (one index space)
  int64_t numel = 0;
  const void* grad = nullptr;  // numel elements of the gradient dtype
  void* param = nullptr;       // numel elements of the parameter (compute) dtype
  float decay = 0.0f;          // 1: weight decay applies
};
inline constexpr int64_t kFusedChunkNumel = 1 << 16;

// 0 fp32, 1 bf16, 2 fp16.
enum class FusedDtype : int { fp32 = 0, bf16 = 1, fp16 = 2 };

// chunks: device array of `num_chunks` FusedChunk; state: the rule's state tensors (unused slots null);
// scalars: the device StepScalars (float64 array).
void launch_fused_update(OptimizerKind kind, const FusedChunk* chunks, int64_t num_chunks, float* master,
                         float* const (&state)[kMaxStates], const double* scalars, const OptimHyper& hyper,
                         FusedDtype grad_dtype, FusedDtype param_dtype, void* cuda_stream);

}  // namespace zest
