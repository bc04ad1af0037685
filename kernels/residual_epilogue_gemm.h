// x·Wᵀ + b + r from one cuBLASLt product (CUDA builds only; residual_epilogue_gemm_cuda.cpp): the residual r is
// the product's C (beta = 1) and the bias is added in its epilogue, so the sum of a Linear's output and its
// residual stream is never a pass over the activations of its own.
#pragma once

#include <torch/torch.h>

#include <optional>

namespace zest {

// x [tokens, in] with contiguous rows, weight [out, in] with contiguous rows, bias [out] contiguous or undefined,
// residual [tokens, out] contiguous, all in one 16-bit dtype, 16-byte aligned; a new [tokens, out] tensor. Nothing
// (and nothing written) where the operands do not fit or cuBLASLt offers no algorithm: the caller then adds.
std::optional<torch::Tensor> linear_plus_residual(const torch::Tensor& x, const torch::Tensor& weight,
                                                  const torch::Tensor& bias, const torch::Tensor& residual);

}  // namespace zest
