// gated_residual(x, y, gate) = x + y·gate with the gate per sample ([B, 1, D], broadcast over the tokens):
// the residual update of HY-Motion's blocks. On CUDA zest's kernels run it (gated_residual.h); elsewhere
// ATen's two ops.
#pragma once

#include "kernels/kernel_tensors.h"

#include <torch/torch.h>

namespace zest {

// With `samples`, x and y are packed rows [rows, D] of samples.batch() samples (kernels/kernel_tensors.h), each
// row gated by its sample's gate.
torch::Tensor gated_residual(const torch::Tensor& x, const torch::Tensor& y, const torch::Tensor& gate,
                             const SampleRows* samples = nullptr);
// Whether gated_residual runs zest's kernels: a CUDA build; x and y [B, L, D] (packed: [rows, D]) of one shape
// on CUDA in one kernel dtype; gate [B, 1, D] in that dtype with D contiguous (a chunk of the modulation's output
// qualifies).
bool uses_gated_residual_kernels(const torch::Tensor& x, const torch::Tensor& y, const torch::Tensor& gate,
                                 const SampleRows* samples = nullptr);

}  // namespace zest
