// The fused CUDA optimizer pass, without LibTorch (nvcc compiles it): one kernel launch updates every
// chunk of the rank's flat shard with the configured update rule (optim/optimizers.h) — the decay mask
// folded in per chunk, the step's numbers read from the StepScalars on the device (a skipped step returns
// at once) — and writes the updated values in the compute dtype to the parameter shard in the same pass.
#pragma once

#include "optim/optimizers.h"

#include <cstdint>

namespace zest {

// A run of at most kFusedChunkNumel elements with one decay flag, inside one segment. The gradient is
// found through the segment's entry of a device table of gradient pointers written every step
// (launch_store_pointers): the engine's full gradients are allocated anew within each step, the other
// pointers never change.
struct FusedChunk {
  int64_t state_offset = 0;  // index into the master and the state tensors (one index space)
  int64_t numel = 0;
  int64_t grad_offset = 0;   // elements from the segment's gradient pointer to the chunk's first
  void* param = nullptr;     // numel elements of the parameter (compute) dtype; null: none written
  int32_t segment = 0;       // index into the gradient pointer table
  float decay = 0.0f;        // 1: weight decay applies
};
inline constexpr int64_t kFusedChunkNumel = 1 << 16;

// 0 fp32, 1 bf16, 2 fp16.
enum class FusedDtype : int { fp32 = 0, bf16 = 1, fp16 = 2 };

// dst[i] = pointers[i] for i < count, on the device in stream order (kernel arguments, so a CUDA graph
// that captured it writes the pointers of its own capture on every replay).
void launch_store_pointers(const void** dst, const void* const* pointers, int64_t count, void* cuda_stream);

// chunks: device array of `num_chunks` FusedChunk; grads: device table of each segment's gradient
// pointer; state: the rule's state tensors (unused slots null); scalars: the device StepScalars (float64
// array).
void launch_fused_update(OptimizerKind kind, const FusedChunk* chunks, int64_t num_chunks,
                         const void* const* grads, float* master,
                         float* const (&state)[kMaxStates], const double* scalars, const OptimHyper& hyper,
                         FusedDtype grad_dtype, FusedDtype param_dtype, void* cuda_stream);

}  // namespace zest
