// qk_norm_rope: HY-Motion's attention inputs from one or two qkv projections (one per stream, joined
// along the sequence): q and k per-head RMS-normed with their stream's weights, RoPE on the first
// cos.size(0) positions of the joint sequence, v as is, each [B, ΣS, H, d]. On CUDA zest's kernels run it
// (qk_norm_rope.h); callers use the op chain elsewhere.
#pragma once

#include <torch/torch.h>

#include <vector>

namespace zest {

struct QkvProjection {
  torch::Tensor proj;      // [B, S_i, 3·H·d], last dim contiguous (a slice of a wider projection qualifies)
  torch::Tensor q_weight;  // [d]
  torch::Tensor k_weight;  // [d]
};

struct AttentionInputs {
  torch::Tensor q, k, v;  // [B, ΣS_i, H, d]; q and k contiguous, v too with two streams (one: a view of proj)
};

// Whether the kernels take these inputs: a CUDA build; one or two projections in one kernel dtype on
// one device, head dim 64 or 128, rows and pointers 16-byte aligned, weights of the projection's dtype,
// float32 tables of at most ΣS_i rows.
// On by default; [engine.kernels] qk_norm_rope = false (or ZEST_QK_NORM_ROPE=0) switches them off (the op chain
// runs instead); the setter is for tests.
bool qk_norm_rope_enabled();
void set_qk_norm_rope(bool enabled);

bool uses_qk_norm_rope_kernels(const std::vector<QkvProjection>& streams, int64_t num_heads, const torch::Tensor& cos,
                               const torch::Tensor& sin);
AttentionInputs qk_norm_rope(const std::vector<QkvProjection>& streams, int64_t num_heads, const torch::Tensor& cos,
                             const torch::Tensor& sin, double eps);

}  // namespace zest
