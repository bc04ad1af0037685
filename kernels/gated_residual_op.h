// gated_residual(x, y, gate) = x + y·gate with the gate per sample ([B, 1, D], broadcast over the tokens):
// the residual update of HY-Motion's blocks. On CUDA zest's kernels run it (gated_residual.h); elsewhere
// ATen's two ops.
#pragma once

#include <torch/torch.h>

namespace zest {

torch::Tensor gated_residual(const torch::Tensor& x, const torch::Tensor& y, const torch::Tensor& gate);
// Whether gated_residual runs zest's kernels: a CUDA build; x and y [B, L, D] of one shape on CUDA in one
// kernel dtype; gate [B, 1, D] in that dtype with D contiguous (a chunk of the modulation's output qualifies).
bool uses_gated_residual_kernels(const torch::Tensor& x, const torch::Tensor& y, const torch::Tensor& gate);

}  // namespace zest
