// The residual-epilogue product (see residual_epilogue_gemm.h) with cuBLASLt as kernels/cublaslt.h calls it: a
// plan (descriptors and the heuristic's algorithm) per shape and thread, made once and reused.
#include "kernels/residual_epilogue_gemm.h"

#include "kernels/cublaslt.h"

#include <ATen/record_function.h>

#include <tuple>
#include <vector>

namespace zest {
namespace {

// D [out, tokens] (column-major, ld out) = W stored [in, out] (op T, ld lda) · X [in, tokens] (ld ldb) + C, with
// the bias epilogue where there is a bias; 16-bit operands, float32 accumulation.
struct Shape {
  bool with_bias;
  int64_t out, tokens, in, lda, ldb;
  cudaDataType type;
  uint32_t alignment;
  auto key() const { return std::tuple(with_bias, out, tokens, in, lda, ldb, static_cast<int>(type), alignment); }
};

// Descriptors are never destroyed: a plan per shape and thread lives as long as the process (a handful).
struct Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulHeuristicResult_t algorithm{};
  bool usable = false;
};

Plan make_plan(const Shape& s) {
  const CublasLtApi& api = cublas_lt();
  Plan plan;
  const cublasOperation_t op_a = CUBLAS_OP_T, op_b = CUBLAS_OP_N;
  const cublasLtEpilogue_t epilogue = s.with_bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
  const bool ok = api.desc_create(&plan.op, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS &&
                  api.desc_set(plan.op, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)) == CUBLAS_STATUS_SUCCESS &&
                  api.desc_set(plan.op, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)) == CUBLAS_STATUS_SUCCESS &&
                  api.desc_set(plan.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)) ==
                      CUBLAS_STATUS_SUCCESS &&
                  api.layout_create(&plan.a, s.type, s.in, s.out, s.lda) == CUBLAS_STATUS_SUCCESS &&
                  api.layout_create(&plan.b, s.type, s.in, s.tokens, s.ldb) == CUBLAS_STATUS_SUCCESS &&
                  api.layout_create(&plan.d, s.type, s.out, s.tokens, s.out) == CUBLAS_STATUS_SUCCESS;
  plan.usable = ok && best_algorithm(plan.op, plan.a, plan.b, plan.d, s.alignment, &plan.algorithm);
  return plan;
}

}  // namespace

std::optional<torch::Tensor> linear_plus_residual(const torch::Tensor& x, const torch::Tensor& weight,
                                                  const torch::Tensor& bias, const torch::Tensor& residual) {
  if (x.dim() != 2 || weight.dim() != 2 || residual.dim() != 2 || x.size(1) != weight.size(1) ||
      residual.size(0) != x.size(0) || residual.size(1) != weight.size(0) || !residual.is_contiguous()) {
    return std::nullopt;
  }
  const bool with_bias = bias.defined();
  if (with_bias ? (bias.numel() != weight.size(0) || !fit_16bit_epilogue_product({&x, &weight, &residual, &bias}))
                : !fit_16bit_epilogue_product({&x, &weight, &residual})) {
    return std::nullopt;
  }
  const int64_t tokens = x.size(0), in = x.size(1), out = weight.size(0);
  if (out % 8 != 0 || tokens == 0) return std::nullopt;
  auto y = torch::empty({tokens, out}, x.options());
  const Shape shape{with_bias, out, tokens, in, weight.stride(0), x.stride(0),
                    cuda_16bit_type_of(x),
                    common_alignment({weight.data_ptr(), x.data_ptr(), residual.data_ptr(), y.data_ptr()})};
  Plan& plan = cached_plan(shape, make_plan);
  if (!plan.usable) return std::nullopt;
  const void* bias_pointer = with_bias ? bias.data_ptr() : nullptr;
  if (with_bias && cublas_lt().desc_set(plan.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_pointer,
                                        sizeof(bias_pointer)) != CUBLAS_STATUS_SUCCESS) {
    return std::nullopt;
  }
  // Named for the profiler and the FLOP counter (profiling/flop_counter.cpp), as the other epilogue products.
  RECORD_FUNCTION("zest::mm_epilogue", std::vector<c10::IValue>({x, weight.t()}));
  if (matmul_status(plan.op, plan.algorithm, weight.data_ptr(), plan.a, x.data_ptr(), plan.b, 1.0f, residual.data_ptr(),
                    y.data_ptr(), plan.d) != CUBLAS_STATUS_SUCCESS) {
    return std::nullopt;
  }
  return y;
}

}  // namespace zest
