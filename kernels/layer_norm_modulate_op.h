// HY-Motion's modulated layer norm on CUDA through zest's kernels (layer_norm_modulate.h): whether they
// take an input, and the autograd function. layer_norm_modulate (models/common/fused_norms.h) uses them
// where they apply and its ATen form elsewhere.
#pragma once

#include "kernels/kernel_tensors.h"

#include <torch/torch.h>

namespace zest {

// x [B, L, D] on CUDA (with `samples`: packed rows [rows, D] of samples.batch() samples, kernels/kernel_tensors.h),
// D a width the kernels split (a multiple of 32, layer_norm_modulate.h); shift and scale [B, 1, D] in x's dtype
// (fp32/bf16/fp16) with D contiguous (chunks of the modulation's output qualify).
bool uses_layer_norm_modulate_kernels(const torch::Tensor& x, const torch::Tensor& shift, const torch::Tensor& scale,
                                      const SampleRows* samples = nullptr);
// LayerNorm(x)·(1 + scale) + shift in float32, rounded to x's dtype, contiguous; only where
// uses_layer_norm_modulate_kernels holds.
torch::Tensor layer_norm_modulate_with_kernels(const torch::Tensor& x, const torch::Tensor& shift,
                                               const torch::Tensor& scale, double eps,
                                               const SampleRows* samples = nullptr);

}  // namespace zest
