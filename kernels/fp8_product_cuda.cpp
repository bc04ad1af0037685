// The fp8 casts' tensor glue and the fp8 products with cuBLASLt (see fp8_product.h). A plan (descriptors and
// the heuristic's algorithm) is made once per shape, epilogue and thread and reused; per call only the
// pointers are set. cuBLASLt's fp8 products take their first operand transposed and the second not ("TN"):
// a row-major [N, K] matrix read as column-major is Kᵀ×N, so with y row-major as column-major [N, M],
// y = b·aᵀ in cuBLASLt's terms is exactly op_T(b) · a — both operands as the casts wrote them.
#include "kernels/fp8_product.h"

#include "kernels/cublaslt.h"
#include "kernels/kernel_tensors.h"

#include <ATen/cuda/CUDAContext.h>
#include <ATen/record_function.h>

#include <tuple>
#include <vector>

namespace zest {
namespace {

cudaDataType fp8_type(Fp8Format f) { return f == Fp8Format::e4m3 ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2; }

cudaDataType result_type(const torch::Tensor& y) {
  return y.scalar_type() == torch::kBFloat16 ? CUDA_R_16BF : CUDA_R_16F;
}

cublasLtEpilogue_t lt_epilogue(Fp8Epilogue e) {
  switch (e) {
    case Fp8Epilogue::none: return CUBLASLT_EPILOGUE_DEFAULT;
    case Fp8Epilogue::bias: return CUBLASLT_EPILOGUE_BIAS;
    case Fp8Epilogue::gelu_aux_bias: return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    case Fp8Epilogue::dgelu: return CUBLASLT_EPILOGUE_DGELU;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

struct Shape {
  Fp8Epilogue epilogue;
  bool fast_accumulation;
  Fp8Format a_format, b_format;
  int64_t m, n, k, ldy, aux_ld;
  cudaDataType result;
  uint32_t alignment;
  auto key() const {
    return std::tuple(static_cast<int>(epilogue), fast_accumulation, static_cast<int>(a_format),
                      static_cast<int>(b_format), m, n, k, ldy, aux_ld, static_cast<int>(result), alignment);
  }
};

// Descriptors are never destroyed: a plan per shape and thread lives as long as the process (a few dozen).
struct Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t first = nullptr, second = nullptr, result = nullptr;  // cuBLASLt's A (our b), B (our a), D
  cublasLtMatmulHeuristicResult_t algorithm{};
  std::vector<cublasLtMatmulHeuristicResult_t> candidates;  // to time on the first product (autotune_algorithms)
  std::string failure;  // why there is no plan ("" when usable)
  bool usable() const { return failure.empty(); }
};

template <typename V>
cublasStatus_t set(cublasLtMatmulDesc_t op, cublasLtMatmulDescAttributes_t attribute, const V& value) {
  return cublas_lt().desc_set(op, attribute, &value, sizeof(value));
}

// "" when `status` is success, else what failed.
std::string failed(const char* step, cublasStatus_t status) {
  return status == CUBLAS_STATUS_SUCCESS ? "" : std::string(step) + " (cuBLAS status " + std::to_string(status) + ")";
}

// The plan's descriptors and algorithm; "" when cuBLASLt took them all, else the step it refused.
std::string describe(const Shape& s, Plan& plan) {
  const CublasLtApi& api = cublas_lt();
  const cublasOperation_t transposed = CUBLAS_OP_T, plain = CUBLAS_OP_N;
  const int32_t result_type_id = s.result;
  std::string why = failed("descriptor", api.desc_create(&plan.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  auto step = [&](const char* name, cublasStatus_t status) {
    if (why.empty()) why = failed(name, status);
  };
  step("TRANSA", set(plan.op, CUBLASLT_MATMUL_DESC_TRANSA, transposed));
  step("TRANSB", set(plan.op, CUBLASLT_MATMUL_DESC_TRANSB, plain));
  step("FAST_ACCUM", set(plan.op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, int8_t{s.fast_accumulation ? 1 : 0}));
  step("EPILOGUE", set(plan.op, CUBLASLT_MATMUL_DESC_EPILOGUE, lt_epilogue(s.epilogue)));
  if (s.epilogue == Fp8Epilogue::bias || s.epilogue == Fp8Epilogue::gelu_aux_bias) {
    step("BIAS_DATA_TYPE", set(plan.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, result_type_id));
  }
  if (s.epilogue == Fp8Epilogue::gelu_aux_bias || s.epilogue == Fp8Epilogue::dgelu) {
    step("EPILOGUE_AUX_LD", set(plan.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, s.aux_ld));
    step("EPILOGUE_AUX_DATA_TYPE", set(plan.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, result_type_id));
  }
  // cuBLASLt's view, column-major: D [N, M] = op_T(b stored [K, N]) · a stored [K, M].
  step("layout A", api.layout_create(&plan.first, fp8_type(s.b_format), s.k, s.n, s.k));
  step("layout B", api.layout_create(&plan.second, fp8_type(s.a_format), s.k, s.m, s.k));
  step("layout D", api.layout_create(&plan.result, s.result, s.n, s.m, s.ldy));
  if (!why.empty()) return why;
  cublasStatus_t status = CUBLAS_STATUS_SUCCESS;
  best_algorithm(plan.op, plan.first, plan.second, plan.result, s.alignment, &plan.algorithm, &status);
  if (status == CUBLAS_STATUS_SUCCESS && autotune_algorithms()) {
    plan.candidates = candidate_algorithms(plan.op, plan.first, plan.second, plan.result, s.alignment);
  }
  return failed("heuristic", status);
}

Plan make_plan(const Shape& s) {
  Plan plan;
  plan.failure = describe(s, plan);
  return plan;
}

}  // namespace

Fp8Matrix to_fp8(const torch::Tensor& m, Fp8Format format, bool transposed) {
  TORCH_CHECK(m.dim() == 2 && m.is_cuda() && is_kernel_dtype(m.scalar_type()), "to_fp8: a 2-d CUDA matrix");
  const torch::Tensor rows_contiguous = m.stride(1) == 1 ? m : m.contiguous();
  const Fp8Source source{kernel_dtype_of(m.scalar_type()), rows_contiguous.data_ptr(), m.size(0), m.size(1),
                         rows_contiguous.stride(0)};
  // [scale_inv, …, amax, …]: cuBLASLt refuses (CUBLAS_STATUS_NOT_SUPPORTED, when the product runs) a scale
  // pointer that is not 16-byte aligned, so each value starts its own 16 bytes.
  auto factors = torch::empty({8}, m.options().dtype(torch::kFloat32));
  float* const scale_inv = factors.data_ptr<float>();
  float* const amax = scale_inv + 4;
  auto data = transposed ? torch::empty({m.size(1), m.size(0)}, m.options().dtype(torch::kByte))
                         : torch::empty({m.size(0), m.size(1)}, m.options().dtype(torch::kByte));
  void* stream = current_stream_of(m);
  launch_fp8_amax(source, amax, stream);
  launch_fp8_cast(source, amax, format, transposed, data.data_ptr<uint8_t>(), scale_inv, stream);
  return {data, factors.narrow(0, 0, 1), format};
}

std::string fp8_product(const Fp8Matrix& a, const Fp8Matrix& b, torch::Tensor& y, const Fp8ProductOptions& options) {
  const int64_t m = a.data.size(0), k = a.data.size(1), n = b.data.size(0);
  TORCH_CHECK(b.data.size(1) == k && y.dim() == 2 && y.size(0) == m && y.size(1) == n && y.stride(1) == 1,
              "fp8_product: shapes");
  TORCH_CHECK(!(a.format == Fp8Format::e5m2 && b.format == Fp8Format::e5m2), "fp8_product: two e5m2 operands");
  if (!cublas_lt().loaded) return "this process has no cuBLASLt";
  if (m == 0) return "no rows";
  const bool has_aux = options.epilogue == Fp8Epilogue::gelu_aux_bias || options.epilogue == Fp8Epilogue::dgelu;
  const Shape shape{options.epilogue, options.fast_accumulation, a.format, b.format, m, n, k, y.stride(0),
                    has_aux ? options.aux.stride(0) : 0, result_type(y),
                    common_alignment({a.data.data_ptr(), b.data.data_ptr(), y.data_ptr()})};
  Plan& plan = cached_plan(shape, make_plan);
  if (!plan.usable()) return plan.failure;
  const void* first_scale = b.scale_inv.data_ptr();
  const void* second_scale = a.scale_inv.data_ptr();
  std::string why = failed("A_SCALE_POINTER", set(plan.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, first_scale));
  if (why.empty()) why = failed("B_SCALE_POINTER", set(plan.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, second_scale));
  if (why.empty() && options.bias.defined()) {
    why = failed("BIAS_POINTER", set(plan.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, options.bias.data_ptr()));
  }
  if (why.empty() && has_aux) {
    why = failed("EPILOGUE_AUX_POINTER", set(plan.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, options.aux.data_ptr()));
  }
  if (!why.empty()) return why;
  // Named for the profiler and the FLOP counter (profiling/flop_counter.cpp): [M, K]·[K, N].
  RECORD_FUNCTION("zest::mm_fp8", std::vector<c10::IValue>({a.data, b.data.t()}));
  if (!plan.candidates.empty()) {
    // Trials of an accumulating product write a scratch result (y's layout), not y; the others write y whole.
    const torch::Tensor scratch = options.accumulate ? torch::empty_strided(y.sizes(), y.strides(), y.options()) : y;
    settle_algorithm(plan.candidates, plan.algorithm, [&](const cublasLtMatmulHeuristicResult_t& algorithm) {
      return run_matmul(plan.op, algorithm, b.data.data_ptr(), plan.first, a.data.data_ptr(), plan.second, 0.0f,
                        scratch.data_ptr(), plan.result);
    });
  }
  return failed("cublasLtMatmul",
                matmul_status(plan.op, plan.algorithm, b.data.data_ptr(), plan.first, a.data.data_ptr(), plan.second,
                              options.accumulate ? 1.0f : 0.0f, y.data_ptr(), plan.result));
}

std::string fp8_products_unavailable_here() {
  if (!cublas_lt().loaded) return "this process has no cuBLASLt";
  const cudaDeviceProp* properties = at::cuda::getCurrentDeviceProperties();
  const int capability = properties->major * 10 + properties->minor;
  if (capability >= 89) return "";
  return std::string("fp8 products need fp8 tensor cores (compute capability 8.9 or newer: Ada, Hopper, "
                     "Blackwell); this GPU, ") + properties->name + ", has " + std::to_string(properties->major) + "." +
         std::to_string(properties->minor);
}

}  // namespace zest
