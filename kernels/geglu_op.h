// geglu(proj): hidden · GELU(gate), [hidden ; gate] the two halves of proj's last dimension (diffusers'
// GEGLU after its projection). On CUDA zest's kernels run it (geglu.h); elsewhere ATen's ops.
#pragma once

#include <torch/torch.h>

namespace zest {

torch::Tensor geglu(const torch::Tensor& proj);
// Whether geglu runs zest's kernels for this input (a CUDA build, a contiguous CUDA tensor).
bool uses_geglu_kernels(const torch::Tensor& proj);

}  // namespace zest
