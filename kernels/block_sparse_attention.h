// softmax(q·kᵀ/√d + bias)·v as CUDA kernels that skip the 64 × 64 tiles the bias closes whole (nvcc compiles
// them; kernels/block_sparse_attention_cuda.cpp is the tensor glue). HY-Motion's mask (a motion band, padded
// keys, text queries that see only text) leaves well under half of the tiles open, and LibTorch's fused
// attentions compute every tile and mask afterwards.
// A tile map says per (bias batch, query tile, key tile): closed (skipped), open with an all-zero bias (the
// bias not read) or mixed (read). The forward keeps a float32 log-sum-exp per row; the backward recomputes
// the probabilities from it, one block per key tile, and adds the query gradients in float32 with atomics,
// so their last bits may differ between runs. A row the bias closes whole gets a zero output and gradients.
#pragma once

#include "kernels/kernel_dtype.h"

#include <cstdint>

namespace zest {

inline constexpr int64_t kAttentionTile = 64;  // queries and keys a tile
inline constexpr int64_t kAttentionMaxHeadDim = 128;

enum class AttentionTile : uint8_t { closed = 0, zero_bias = 1, mixed = 2 };

// Element strides of a [batch, seq, heads, head_dim] operand whose head_dim is contiguous.
struct AttentionStrides {
  int64_t batch = 0, seq = 0, head = 0;
};

struct BlockSparseAttentionShape {
  int64_t batch = 0, heads = 0, q_len = 0, k_len = 0, head_dim = 0;
  AttentionStrides q, k, v;           // inputs; outputs and gradients are contiguous [B, S, H, d]
  AttentionStrides grad_out;          // the output's gradient (backward only)
  int64_t bias_batch_stride = 0;      // elements between samples' [q_len, k_len] bias; 0 when shared
  int64_t q_tiles() const { return (q_len + kAttentionTile - 1) / kAttentionTile; }
  int64_t k_tiles() const { return (k_len + kAttentionTile - 1) / kAttentionTile; }
};

// Head dims the kernels take: multiples of 8 up to kAttentionMaxHeadDim (computed padded to a multiple of 16).
bool block_sparse_attention_head_dim_covered(int64_t head_dim);

// map [bias_batches, q_tiles, k_tiles] (AttentionTile values) of bias [bias_batches, q_len, k_len], whose
// rows are contiguous and bias_batch_stride apart, in the shape's dtype (bf16/fp16).
void launch_attention_tile_map(const BlockSparseAttentionShape& shape, int64_t bias_batches, KernelDtype dtype,
                               const void* bias, uint8_t* map, void* cuda_stream);

// out [B, Sq, H, d] contiguous; log_sum_exp [B, H, Sq] float32 (base 2, of the scaled scores), kept for the
// backward. bias_batches is 1 (shared) or B.
void launch_block_sparse_attention_forward(const BlockSparseAttentionShape& shape, KernelDtype dtype, const void* q,
                                           const void* k, const void* v, const void* bias, const uint8_t* map,
                                           int64_t bias_batches, void* out, float* log_sum_exp, void* cuda_stream);

// Float32 workspaces: row_dot [B, H, Sq] (Σ dO·O per row) and dq_sum [B, Sq, H, d]; both are overwritten.
// dq, dk, dv are contiguous [B, S, H, d].
struct BlockSparseAttentionGrads {
  void* dq = nullptr;
  void* dk = nullptr;
  void* dv = nullptr;
  float* row_dot = nullptr;
  float* dq_sum = nullptr;
};
void launch_block_sparse_attention_backward(const BlockSparseAttentionShape& shape, KernelDtype dtype, const void* q,
                                            const void* k, const void* v, const void* bias, const uint8_t* map,
                                            int64_t bias_batches, const void* out, const void* grad_out,
                                            const float* log_sum_exp, const BlockSparseAttentionGrads& grads,
                                            void* cuda_stream);

}  // namespace zest
