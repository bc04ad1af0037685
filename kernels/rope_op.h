// RoPE on CUDA through zest's kernels (rope.h): whether they take an input, and the autograd function.
// HY-Motion's apply_rope (models/hymotion/layers.h) uses them where they apply and its ATen form elsewhere.
#pragma once

#include <torch/torch.h>

namespace zest {

// x [B, S, H, d] contiguous on CUDA in fp32/bf16/fp16, cos/sin float32 [R ≤ S, d] on its device, d even.
bool uses_rope_kernels(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);
// The first cos.size(0) positions rotated, the rest copied; only where uses_rope_kernels holds.
torch::Tensor rope_with_kernels(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);

}  // namespace zest
