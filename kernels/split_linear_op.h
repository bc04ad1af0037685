// split_linear(x, W, b, sizes) = linear(x, W, b) split along its last dim into parts of `sizes` — HY-Motion's
// linear1, whose output is [q | k | v | MLP half]. On CUDA, where linear() accumulates its gradients
// (linear_op.h), each part is its own product over the rows of W and b it owns, so each part is a
// contiguous tensor and backward needs no cat of the parts' gradients: dX = Σ dYᵢ·Wᵢ accumulates in one
// buffer (cuBLAS, beta = 1), and dWᵢ, dbᵢ go into row ranges of the .grad slots. Elsewhere (and with
// [engine.kernels] split_linear = false) the composition.
#pragma once

#include <torch/torch.h>

#include <vector>

namespace zest {

std::vector<torch::Tensor> split_linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                                        const std::vector<int64_t>& sizes);

// split_linear's parts and GELU_tanh of the last part, {parts…, activated}: on the split path with a bias,
// the last part's product writes both through cuBLASLt's GELU epilogue (gelu_epilogue_gemm.h), so no GELU
// pass of its own runs. activated is undefined where no epilogue made it. It is a value, not differentiable:
// hand it to joined_gelu_linear beside the last part, whose backward takes the gradient through GELU.
std::vector<torch::Tensor> split_linear_with_gelu_of_last(const torch::Tensor& x, const torch::Tensor& weight,
                                                          const torch::Tensor& bias, const std::vector<int64_t>& sizes);

// Process-wide switch ([engine.kernels] split_linear, default on; ZEST_SPLIT_LINEAR=0 overrides), for tests and
// A/B runs.
bool split_linear_enabled();
void set_split_linear(bool enabled);

}  // namespace zest
