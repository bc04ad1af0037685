// The fused CUDA optimizer pass, without LibTorch (nvcc compiles it): one kernel launch updates every
// chunk of the rank's flat shard — AdamW or SGD, the decay mask folded in per chunk, the step's numbers
// read from the StepScalars on the device (a skipped step returns at once) — and writes the updated
// values in the compute dtype to the parameter shard in the same pass.
#pragma once

#include <cstdint>

namespace zest {

// A run of at most kFusedChunkNumel elements with one decay flag, inside one segment.
struct FusedChunk {
  int64_t state_offset = 0;  // index into master / exp_avg / exp_avg_sq (one index space)
  int64_t numel = 0;
  const void* grad = nullptr;  // numel elements of the gradient dtype
  void* param = nullptr;       // numel elements of the parameter (compute) dtype
  float decay = 0.0f;          // 1: weight decay applies
};
inline constexpr int64_t kFusedChunkNumel = 1 << 16;

// 0 fp32, 1 bf16, 2 fp16.
enum class FusedDtype : int { fp32 = 0, bf16 = 1, fp16 = 2 };

struct FusedHyper {
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 0.0f;  // AdamW
  float momentum = 0.0f;                                                  // SGD
  bool nesterov = false;
};

// chunks: device array of `num_chunks` FusedChunk; scalars: the device StepScalars (float64 array).
void launch_fused_adamw(const FusedChunk* chunks, int64_t num_chunks, float* master, float* exp_avg,
                        float* exp_avg_sq, const double* scalars, const FusedHyper& hyper, FusedDtype grad_dtype,
                        FusedDtype param_dtype, void* cuda_stream);
void launch_fused_sgd(const FusedChunk* chunks, int64_t num_chunks, float* master, float* momentum_buffer,
                      const double* scalars, const FusedHyper& hyper, FusedDtype grad_dtype, FusedDtype param_dtype,
                      void* cuda_stream);

}  // namespace zest
