// The matrix products of the Linear layers' training paths (CUDA builds only; linear_products_cuda.cpp) in
// the training products' precision (matmul_precision.h). In the compute dtype they are cuBLAS's products
// (ATen's mm/addmm) and cuBLASLt's GELU epilogues (gelu_epilogue_gemm.h). With fp8 the forward products
// (x·Wᵀ) and the input-gradient products (dY·W) cast both operands to fp8 per tensor — activations and
// weights e4m3, gradients e5m2 — and run on fp8 tensor cores (fp8_product.h); the weight-gradient products
// stay in 16 bits and add into the float32 gradient slots (weight_grad_gemm.h). A product fp8 cannot take (a
// dimension not a multiple of 16, no cuBLASLt algorithm) runs in 16 bits and is counted as a fallback of the
// fused path "fp8_matmul" (fused_paths.h), so `zest bench` and `zest train` say so.
#pragma once

#include "kernels/fp8_product.h"
#include "kernels/gelu_epilogue_gemm.h"

#include <torch/torch.h>

#include <optional>

namespace zest {

// One operand of the products: a 16-bit matrix [rows, cols] with contiguous rows, cast to fp8 at most once
// however many products read it (split_linear's input feeds each of its parts).
class ProductInput {
 public:
  static ProductInput activation(torch::Tensor matrix) { return {std::move(matrix), Fp8Format::e4m3}; }
  static ProductInput gradient(torch::Tensor matrix) { return {std::move(matrix), Fp8Format::e5m2}; }

  const torch::Tensor& matrix() const { return matrix_; }
  const Fp8Matrix& fp8() const;  // made on first use

 private:
  ProductInput(torch::Tensor matrix, Fp8Format format) : matrix_(std::move(matrix)), format_(format) {}
  torch::Tensor matrix_;
  Fp8Format format_;
  mutable std::optional<Fp8Matrix> fp8_;
};

// x·Wᵀ + b: [rows, out] from weight [out, in] with contiguous rows (a row range of a wider weight is fine)
// or a column block of one (rows further apart than `in`).
torch::Tensor forward_product(const ProductInput& x, const torch::Tensor& weight, const torch::Tensor& bias);
// y += x·Wᵀ.
void add_forward_product(torch::Tensor& y, const ProductInput& x, const torch::Tensor& weight);
// dY·W: [rows, in] from weight [out, in] (as above).
torch::Tensor input_grad_product(const ProductInput& dy, const torch::Tensor& weight);
// dx += dY·W.
void add_input_grad_product(torch::Tensor& dx, const ProductInput& dy, const torch::Tensor& weight);

// GELU_tanh(x·Wᵀ + b) and its input from one product's epilogue (linear_gelu), in fp8 where it applies;
// nothing where no epilogue product takes the shapes.
std::optional<GeluProduct> gelu_forward_product(const ProductInput& x, const torch::Tensor& weight,
                                                 const torch::Tensor& bias);
// (dY·W) ⊙ GELU_tanh'(h) from one product's epilogue (gelu_backward_of_product), in fp8 where it applies.
std::optional<torch::Tensor> gelu_input_grad_product(const ProductInput& dy, const torch::Tensor& weight,
                                                     const torch::Tensor& h);

}  // namespace zest
