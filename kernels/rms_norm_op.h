// HY-Motion's per-head RMSNorm on CUDA through zest's kernels (rms_norm.h): whether they take an input,
// and the autograd function. HeadNorm (models/hymotion/layers.h) uses them where they apply and its ATen
// form elsewhere.
#pragma once

#include <torch/torch.h>

namespace zest {

// x [B, S, H, d] on CUDA with d contiguous (q or k as views of the qkv projection qualify), d in
// {32, 64, 128, 256}, the weight [d] contiguous in x's dtype (fp32/bf16/fp16).
bool uses_rms_norm_kernels(const torch::Tensor& x, const torch::Tensor& weight);
// bf16(x · rsqrt(mean(x²) + eps)) · weight, contiguous; only where uses_rms_norm_kernels holds.
torch::Tensor rms_norm_with_kernels(const torch::Tensor& x, const torch::Tensor& weight, double eps);

}  // namespace zest
