// The weight-gradient products of the accumulating linears (CUDA builds only; weight_grad_gemm_cuda.cpp):
// dW += dYᵀ·X and db += dYᵀ·1 straight into .grad slots with cuBLAS (beta = 1).
//
// cuBLASLt's bias-gradient epilogue (BGRADB) was measured in its place on an H200 (bench/RESULTS.md,
// 2026-12-02, tenth session): it ran as a separate reduction kernel after the product, slower than the
// product with a column of ones.
#pragma once

#include <torch/torch.h>

namespace zest {

// weight_slot [out, in] += dyᵀ·x (dy [tokens, out], x [tokens, in], both contiguous and in `dtype`, the
// weights' 16-bit dtype); bias_slot [out] += Σ_tokens dy when defined. Slots are float32 or `dtype`, and
// may be row ranges of a wider parameter's slot (a split linear's parts) or column ranges (rows further apart
// than `in`: a joined linear's blocks).
void accumulate_weight_grads(const torch::Tensor& dy, const torch::Tensor& x, const torch::Tensor& weight_slot,
                             const torch::Tensor& bias_slot, torch::ScalarType dtype);

}  // namespace zest
