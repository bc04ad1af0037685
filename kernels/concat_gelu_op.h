// concat_gelu_tanh(left, right) = cat([left, GELU_tanh(right)], -1) for [B, L, ·] tensors or packed rows [N, ·]
// (HY-Motion's single-stream block: attention output beside the activated MLP half). On CUDA zest's kernels
// run it (concat_gelu.h); elsewhere ATen's ops.
#pragma once

#include <torch/torch.h>

namespace zest {

torch::Tensor concat_gelu_tanh(const torch::Tensor& left, const torch::Tensor& right);
// Whether concat_gelu_tanh runs zest's kernels: a CUDA build; left and right [B, L, ·] (or both [N, ·]) on one
// CUDA device in one kernel dtype, each with its last dimension contiguous and its rows evenly spaced (a slice of a
// projection's last dimension qualifies).
bool uses_concat_gelu_kernels(const torch::Tensor& left, const torch::Tensor& right);

}  // namespace zest
