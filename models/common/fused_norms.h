// Norms computed in float32 that keep only compute-dtype tensors for backward. Autocast computes
// LayerNorm and GroupNorm in float32 and returns float32, so the elementwise op after them (a
// modulation, a SiLU) runs in float32 too and autograd saves two float32 copies per norm (the upcast
// input and the norm's output) until backward. These functions give exactly those forward values,
// cast to the input's dtype for the next matrix product (which would cast them anyway), and save only
// the input as it came plus the statistics: backward recomputes the normalised values in float32.
// In float32 runs they are the plain ops.
#pragma once

#include "kernels/kernel_tensors.h"

#include <torch/torch.h>

namespace zest {

// (LayerNorm(x) · (1 + scale) + shift), LayerNorm over the last dim without affine; float32 math,
// result in x's dtype. shift and scale broadcast against x; with `samples`, x is packed rows [rows, D] and
// shift and scale are per sample [B, 1, D] (kernels/kernel_tensors.h). Per-sample modulation on CUDA runs
// zest's kernels (kernels/layer_norm_modulate_op.h).
torch::Tensor layer_norm_modulate(const torch::Tensor& x, const torch::Tensor& shift, const torch::Tensor& scale,
                                  double eps, const SampleRows* samples = nullptr);

// LayerNorm(x) over the last dim with affine weight and bias; float32 math, result in x's dtype. On CUDA
// zest's row kernels run it (kernels/layer_norm_modulate_op.h; [engine.kernels] layer_norm_kernels).
torch::Tensor layer_norm_affine(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                                double eps);

// GroupNorm(x) with affine weight and bias over [N, C, *], then SiLU when `silu`; float32 math, result in
// x's dtype and memory layout. With `shift` ([N, C], x's dtype), the norm of x + shift at every position: on
// the kernels the sum is never written and the shift's gradient takes no pass over the activations (a UNet
// resnet's time embedding). Channels-last CUDA activations run zest's kernels (kernels/group_norm_nhwc.h),
// everything else ATen's float32 group norm on an NCHW float32 copy (of x + shift).
torch::Tensor group_norm_silu(const torch::Tensor& x, int64_t groups, const torch::Tensor& weight,
                              const torch::Tensor& bias, double eps, bool silu, const torch::Tensor& shift = {});
// Whether group_norm_silu runs zest's channels-last kernels for these inputs.
bool uses_group_norm_kernels(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                             int64_t groups, const torch::Tensor& shift = {});

}  // namespace zest
