// block_sparse_attention: softmax(q·kᵀ/√d + bias)·v over [B, S, H, d] tensors by zest's CUDA kernels, which
// skip the 64 × 64 tiles the bias closes whole (block_sparse_attention.h); callers use LibTorch's attention elsewhere.
#pragma once

#include <torch/torch.h>

namespace zest {

// Off by default (slower than LibTorch's cuDNN attention at HY-Motion's release, bench/RESULTS.md);
// [engine.kernels] block_sparse_attention = true (or ZEST_BLOCK_SPARSE_ATTENTION=1) switches the kernels on;
// the setter is for tests.
bool block_sparse_attention_enabled();
void set_block_sparse_attention(bool enabled);

// Whether the kernels take these inputs: a CUDA build; q [B, Sq, H, d], k and v [B, Sk, H, d] (views of a wider
// tensor qualify: the head dim contiguous, the other strides whole 16-byte rows, the data 16-byte aligned);
// an additive bias [B or 1, 1, Sq, Sk] with contiguous rows (a batch stride of 0 shares it); all bf16 or fp16
// on one device; d a multiple of 8 up to 128. With the switch off, and for CPU tensors, float32 and calls
// without a bias, the attention is LibTorch's by design and not recorded; the rest record their decision in
// fused_paths.h.
bool uses_block_sparse_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                 const torch::Tensor& bias);
// Whether the kernels read a [B, S, H, d] tensor (q, k, v, the output's gradient) as it is: the head dim
// contiguous, every other stride a whole number of 8 elements (a size-1 dim's stride is never used) and the
// data 16-byte aligned, since they load 16 bytes at a time.
bool has_block_sparse_attention_layout(const torch::Tensor& t);
// out [B, Sq, H, d] contiguous in q's dtype, differentiable in q, k, v (not in the bias); only where
// uses_block_sparse_attention holds. A row the bias closes whole gives zeros (LibTorch's attention gives NaN).
torch::Tensor block_sparse_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                     const torch::Tensor& bias);

}  // namespace zest
