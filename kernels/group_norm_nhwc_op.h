// The channels-last group-norm kernels on tensors (CUDA builds only; group_norm_nhwc_cuda.cpp): which inputs
// they take, and forward and backward with the outputs allocated on the current stream. The autograd function
// around them is group_norm_silu's (models/common/fused_norms.cpp).
#pragma once

#include <torch/torch.h>

namespace zest {

// What forward returns, and backward reads again.
struct GroupNormForward {
  torch::Tensor y;              // x's dtype, channels-last
  torch::Tensor mean, rstd;     // float [n, groups]
  torch::Tensor channel_means;  // with a shift: float [n, c], each channel's mean of x + shift; else undefined
};

struct GroupNormGrads {
  torch::Tensor dx;              // x's dtype, channels-last
  torch::Tensor dweight, dbias;  // float [c]
  torch::Tensor dshift;          // with a shift: float [n, c]; else undefined
};

// Whether the kernels take these inputs: channels-last CUDA activations of a kernel dtype, weight and bias (and
// shift, [n, c], when defined) of that dtype and contiguous, channels a multiple of groups.
bool group_norm_nhwc_applies(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                             const torch::Tensor& shift, int64_t groups);

// GroupNorm(x + shift[n, c] at every pixel) · weight + bias, then SiLU when `silu`; shift may be undefined.
GroupNormForward group_norm_nhwc_forward(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                                         const torch::Tensor& shift, int64_t groups, double eps, bool silu);

// The gradients from dy, with `saved` the forward's statistics.
GroupNormGrads group_norm_nhwc_backward(const torch::Tensor& dy, const torch::Tensor& x, const torch::Tensor& shift,
                                        const GroupNormForward& saved, const torch::Tensor& weight,
                                        const torch::Tensor& bias, int64_t groups, bool silu);

}  // namespace zest
