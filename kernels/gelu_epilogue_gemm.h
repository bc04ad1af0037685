// Products whose epilogue applies GELU_tanh or its derivative (cuBLASLt, CUDA builds only;
// gelu_epilogue_gemm_cuda.cpp): the GELU of an MLP's first product and the GELU backward of the product
// that meets it in backward, without an elementwise pass over the hidden activations of their own.
// Each returns nothing (and writes nothing) where cuBLASLt offers no algorithm for the shapes; callers
// then run the product and ATen's GELU.
#pragma once

#include <torch/torch.h>

#include <optional>

namespace zest {

struct GeluProduct {
  torch::Tensor activated;       // GELU_tanh(x·Wᵀ + b)
  torch::Tensor pre_activation;  // x·Wᵀ + b, what GELU's backward reads
};

// From one product with cuBLASLt's GELU_AUX_BIAS epilogue: x [tokens, in] contiguous, weight [out, in] with
// contiguous rows (a row range of a wider weight is fine), bias [out] contiguous; both outputs new
// [tokens, out] tensors in x's dtype. GELU in float32 on the product, rounded once.
std::optional<GeluProduct> linear_gelu(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias);

// dh = (dy·W) ⊙ GELU_tanh'(h) from one product with the DGELU epilogue: dy [tokens, out] contiguous, weight
// [out, width] with contiguous rows (a column block of a wider weight is fine), h [tokens, width] contiguous;
// dh a new [tokens, width] tensor.
std::optional<torch::Tensor> gelu_backward_of_product(const torch::Tensor& dy, const torch::Tensor& weight,
                                                      const torch::Tensor& h);

// Process-wide switch ([engine.kernels] gelu_epilogue, default on; ZEST_GELU_EPILOGUE=0 overrides), for tests and
// A/B runs.
bool gelu_epilogue_enabled();
void set_gelu_epilogue(bool enabled);

}  // namespace zest
