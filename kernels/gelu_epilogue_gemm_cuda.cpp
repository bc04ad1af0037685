// The GELU-epilogue products (see gelu_epilogue_gemm.h) with cuBLASLt as kernels/cublaslt.h calls it. A plan
// (descriptors and the heuristic's algorithm) is made once per shape and thread and reused; only the pointers
// change between calls.
#include "kernels/gelu_epilogue_gemm.h"

#include "core/kernel_switches.h"
#include "kernels/cublaslt.h"

#include <ATen/cuda/CUDAContext.h>
#include <ATen/record_function.h>

#include <tuple>
#include <vector>

namespace zest {
namespace {

KernelSwitch& epilogue_switch() {  // [engine.kernels] gelu_epilogue (core/kernel_switches.h)
  static KernelSwitch& on = kernel_switch("gelu_epilogue");
  return on;
}

// D [m, n] (column-major, ld m) = epilogue(op_a(A) [m, k] · B [k, n]), 16-bit A, B and D, float32
// accumulation; A stored [k, m] (op T) or [m, k] (op N) with leading dimension lda, B stored [k, n] with ldb.
// alignment: the bytes every operand's pointer is a multiple of (16 to 256), which the heuristic is told: by
// default it assumes 256 and may pick a kernel that needs it.
struct Shape {
  cublasLtEpilogue_t epilogue;
  cublasOperation_t op_a;
  int64_t m, n, k, lda, ldb, aux_ld;
  cudaDataType type;
  uint32_t alignment;
  auto key() const {
    return std::tuple(static_cast<int>(epilogue), static_cast<int>(op_a), m, n, k, lda, ldb, aux_ld,
                      static_cast<int>(type), alignment);
  }
};

// Descriptors are never destroyed: a plan per shape and thread lives as long as the process (a handful).
struct Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulHeuristicResult_t algorithm{};
  std::vector<cublasLtMatmulHeuristicResult_t> candidates;  // to time on the first product (autotune_algorithms)
  bool usable = false;
};

Plan make_plan(const Shape& s) {
  const CublasLtApi& api = cublas_lt();
  Plan plan;
  const bool a_transposed = s.op_a == CUBLAS_OP_T;
  const cublasOperation_t op_b = CUBLAS_OP_N;
  const bool ok = api.desc_create(&plan.op, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS &&
                  api.desc_set(plan.op, CUBLASLT_MATMUL_DESC_TRANSA, &s.op_a, sizeof(s.op_a)) == CUBLAS_STATUS_SUCCESS &&
                  api.desc_set(plan.op, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)) == CUBLAS_STATUS_SUCCESS &&
                  api.desc_set(plan.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &s.epilogue, sizeof(s.epilogue)) ==
                      CUBLAS_STATUS_SUCCESS &&
                  api.desc_set(plan.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &s.aux_ld, sizeof(s.aux_ld)) ==
                      CUBLAS_STATUS_SUCCESS &&
                  api.layout_create(&plan.a, s.type, a_transposed ? s.k : s.m, a_transposed ? s.m : s.k, s.lda) ==
                      CUBLAS_STATUS_SUCCESS &&
                  api.layout_create(&plan.b, s.type, s.k, s.n, s.ldb) == CUBLAS_STATUS_SUCCESS &&
                  api.layout_create(&plan.d, s.type, s.m, s.n, s.m) == CUBLAS_STATUS_SUCCESS;
  plan.usable = ok && best_algorithm(plan.op, plan.a, plan.b, plan.d, s.alignment, &plan.algorithm);
  if (plan.usable && autotune_algorithms()) {
    plan.candidates = candidate_algorithms(plan.op, plan.a, plan.b, plan.d, s.alignment);
  }
  return plan;
}

// Whether the GELU products are on and may take these operands (cublaslt.h).
bool fits(std::initializer_list<const torch::Tensor*> operands) {
  return epilogue_switch().enabled() && fit_16bit_epilogue_product(operands);
}

// Runs the plan's product into d with the given epilogue pointers; false when the plan has no algorithm
// or cuBLASLt refuses the call (nothing was written then).
bool run(const Shape& s, const void* a, const void* b, void* d, const void* bias, void* aux) {
  const CublasLtApi& api = cublas_lt();
  Plan& plan = cached_plan(s, make_plan);
  if (!plan.usable) return false;
  if (bias != nullptr &&
      api.desc_set(plan.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)) != CUBLAS_STATUS_SUCCESS) {
    return false;
  }
  if (api.desc_set(plan.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux)) != CUBLAS_STATUS_SUCCESS) {
    return false;
  }
  // Each trial writes d (and aux) whole (beta 0), as the product itself does after it.
  settle_algorithm(plan.candidates, plan.algorithm, [&](const cublasLtMatmulHeuristicResult_t& algorithm) {
    return run_matmul(plan.op, algorithm, a, plan.a, b, plan.b, 0.0f, d, plan.d);
  });
  return run_matmul(plan.op, plan.algorithm, a, plan.a, b, plan.b, 0.0f, d, plan.d);
}

}  // namespace

bool gelu_epilogue_enabled() { return epilogue_switch().enabled(); }
void set_gelu_epilogue(bool enabled) { epilogue_switch().set(enabled); }

std::optional<GeluProduct> linear_gelu(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  if (x.dim() != 2 || weight.dim() != 2 || !bias.defined() || x.size(1) != weight.size(1) ||
      bias.numel() != weight.size(0) || !fits({&x, &weight, &bias})) {
    return std::nullopt;
  }
  const int64_t tokens = x.size(0), in = x.size(1), out = weight.size(0);
  if (out % 8 != 0 || tokens == 0) return std::nullopt;
  // Row-major [tokens, out] is column-major [out, tokens]: D = Wᵀ-stored-as-[in, out] (op T) · X [in, tokens].
  GeluProduct product{torch::empty({tokens, out}, x.options()), torch::empty({tokens, out}, x.options())};
  const Shape shape{CUBLASLT_EPILOGUE_GELU_AUX_BIAS, CUBLAS_OP_T, out, tokens, in, weight.stride(0), x.stride(0), out,
                    cuda_16bit_type_of(x),
                    common_alignment({weight.data_ptr(), x.data_ptr(), product.activated.data_ptr()})};
  RECORD_FUNCTION("zest::mm_epilogue", std::vector<c10::IValue>({x, weight.t()}));
  if (!run(shape, weight.data_ptr(), x.data_ptr(), product.activated.data_ptr(), bias.data_ptr(),
           product.pre_activation.data_ptr())) {
    return std::nullopt;
  }
  return product;
}

std::optional<torch::Tensor> gelu_backward_of_product(const torch::Tensor& dy, const torch::Tensor& weight,
                                                      const torch::Tensor& h) {
  if (dy.dim() != 2 || weight.dim() != 2 || h.dim() != 2 || dy.size(1) != weight.size(0) ||
      h.size(0) != dy.size(0) || h.size(1) != weight.size(1) || !fits({&dy, &weight, &h})) {
    return std::nullopt;
  }
  const int64_t tokens = dy.size(0), out = dy.size(1), width = weight.size(1);
  if (width % 8 != 0 || tokens == 0) return std::nullopt;
  // Row-major dh [tokens, width] is column-major [width, tokens] = W (stored [width, out], op N) · dYᵀ [out, tokens].
  auto dh = torch::empty({tokens, width}, dy.options());
  const Shape shape{CUBLASLT_EPILOGUE_DGELU, CUBLAS_OP_N, width, tokens, out, weight.stride(0), dy.stride(0),
                    h.stride(0), cuda_16bit_type_of(dy),
                    common_alignment({weight.data_ptr(), dy.data_ptr(), dh.data_ptr()})};
  RECORD_FUNCTION("zest::mm_epilogue", std::vector<c10::IValue>({dy, weight}));
  if (!run(shape, weight.data_ptr(), dy.data_ptr(), dh.data_ptr(), nullptr, h.data_ptr())) return std::nullopt;
  return dh;
}

}  // namespace zest
