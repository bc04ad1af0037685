// Matrix products of fp8 operands scaled per tensor, on fp8 tensor cores (cuBLASLt; CUDA builds only,
// fp8_product_cuda.cpp): the casts of 16-bit matrices to fp8 (fp8_cast.h) and the product of two such
// matrices into a 16-bit result, with cuBLASLt's bias, GELU_AUX_BIAS or DGELU epilogue or added into the
// result. The training products of the Linear layers use them with [engine] matmul = "fp8"
// (linear_products.h decides where).
#pragma once

#include "kernels/fp8_cast.h"

#include <torch/torch.h>

#include <string>

namespace zest {

// An fp8 matrix: its values' bits (uint8 [rows, cols], row-major) and the float32 factor [1] on the device
// that turns them back into the values they stand for.
struct Fp8Matrix {
  torch::Tensor data;
  torch::Tensor scale_inv;
  Fp8Format format = Fp8Format::e4m3;
};

// m [rows, cols] (16-bit or float32 on CUDA, each row contiguous) as fp8, scaled by its absolute maximum;
// transposed: mᵀ [cols, rows].
Fp8Matrix to_fp8(const torch::Tensor& m, Fp8Format format, bool transposed = false);

enum class Fp8Epilogue {
  none,           // y = a·bᵀ, or y += a·bᵀ with accumulate
  bias,           // y = a·bᵀ + bias
  gelu_aux_bias,  // y = GELU_tanh(a·bᵀ + bias), aux = a·bᵀ + bias
  dgelu,          // y = (a·bᵀ) ⊙ GELU_tanh'(aux)
};

struct Fp8ProductOptions {
  Fp8Epilogue epilogue = Fp8Epilogue::none;
  torch::Tensor bias;              // [N] in y's dtype, for bias and gelu_aux_bias
  torch::Tensor aux;               // [M, N] in y's dtype, rows contiguous: written by gelu_aux_bias, read by dgelu
  bool accumulate = false;         // y += a·bᵀ (epilogue none only)
  bool fast_accumulation = false;  // Hopper's faster fp8 accumulation (forward products, as is usual)
};

// y [M, N] (bf16 or fp16, rows contiguous) = epilogue(a [M, K] · bᵀ), b [N, K], scaled back by both
// factors. Returns "" when it ran; else why not (cuBLASLt offers no algorithm for the shapes, or refused the
// call), with y untouched.
std::string fp8_product(const Fp8Matrix& a, const Fp8Matrix& b, torch::Tensor& y, const Fp8ProductOptions& options);

// Why fp8 products cannot run here ("" when they can): this process's GPU needs fp8 tensor cores (compute
// capability 8.9 or newer) and the cuBLASLt LibTorch loaded.
std::string fp8_products_unavailable_here();

}  // namespace zest
