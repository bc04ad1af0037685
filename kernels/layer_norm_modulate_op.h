// HY-Motion's modulated layer norm, and the affine layer norm, on CUDA through zest's kernels
// (layer_norm_modulate.h): whether they take an input, and the autograd functions. layer_norm_modulate and
// layer_norm_affine (models/common/fused_norms.h) use them where they apply and their ATen forms elsewhere.
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

// x [..., D] on CUDA in a kernel dtype, D covered; weight and bias [D] contiguous in x's dtype; the switch
// [engine.kernels] layer_norm_kernels on.
bool uses_layer_norm_affine_kernels(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias);
// LayerNorm(x)·weight + bias over the last dim in float32, rounded to x's dtype, contiguous; only where
// uses_layer_norm_affine_kernels holds.
torch::Tensor layer_norm_affine_with_kernels(const torch::Tensor& x, const torch::Tensor& weight,
                                             const torch::Tensor& bias, double eps);

// Process-wide switch ([engine.kernels] layer_norm_kernels; ZEST_LAYER_NORM_KERNELS overrides).
bool layer_norm_kernels_enabled();
void set_layer_norm_kernels(bool enabled);

}  // namespace zest
