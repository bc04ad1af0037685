// The weight-gradient products (see weight_grad_gemm.h). cuBLAS is the copy LibTorch loaded: its entry
// point is looked up in the process (dlsym) rather than linked, so zest never pairs LibTorch with a second
// cuBLAS from the toolkit.
#include "kernels/weight_grad_gemm.h"

#include "core/check.h"

#include <ATen/cuda/CUDAContext.h>
#include <ATen/record_function.h>
#include <cublas_v2.h>

#include <dlfcn.h>

namespace zest {
namespace {

cudaDataType cuda_type_of(torch::ScalarType dtype) {
  switch (dtype) {
    case torch::kFloat32: return CUDA_R_32F;
    case torch::kBFloat16: return CUDA_R_16BF;
    default: return CUDA_R_16F;
  }
}

// cublasGemmEx's C entry point (cublas_api.h; the header also overloads the name for C++).
using GemmEx = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                                  const void*, cudaDataType, int, const void*, cudaDataType, int, const void*, void*,
                                  cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);

GemmEx gemm_ex() {
  static const GemmEx fn = reinterpret_cast<GemmEx>(dlsym(RTLD_DEFAULT, "cublasGemmEx"));
  ZEST_CHECK(fn != nullptr, "weight gradient: cublasGemmEx is not loaded in this process");
  return fn;
}

// C [m, n] (column-major, ldc) += op_a(A) · op_b(B), 16-bit A and B, float32 accumulation.
void gemm_accumulate(cublasOperation_t op_a, cublasOperation_t op_b, int64_t m, int64_t n, int64_t k, const void* a,
                     int64_t lda, const void* b, int64_t ldb, const torch::Tensor& c, int64_t ldc,
                     torch::ScalarType dtype) {
  ZEST_CHECK(m <= INT32_MAX && n <= INT32_MAX && k <= INT32_MAX && lda <= INT32_MAX && ldb <= INT32_MAX &&
                 ldc <= INT32_MAX,
             "weight gradient: matrix of more than 2^31 rows or columns");
  const float one = 1.0f;
  const cudaDataType ab = cuda_type_of(dtype);
  const cublasStatus_t status =
      gemm_ex()(at::cuda::getCurrentCUDABlasHandle(), op_a, op_b, static_cast<int>(m), static_cast<int>(n),
                static_cast<int>(k), &one, a, ab, static_cast<int>(lda), b, ab, static_cast<int>(ldb), &one,
                c.data_ptr(), cuda_type_of(c.scalar_type()), static_cast<int>(ldc), CUBLAS_COMPUTE_32F,
                CUBLAS_GEMM_DEFAULT);
  ZEST_CHECK(status == CUBLAS_STATUS_SUCCESS, "weight gradient: cublasGemmEx failed with status ",
             static_cast<int>(status));
}

// A column of ones [tokens] in dtype on device, grown as needed and kept per device (db = dYᵀ·1).
torch::Tensor ones_column(int64_t tokens, const torch::Tensor& like) {
  thread_local std::vector<torch::Tensor> cache;
  const size_t index =
      static_cast<size_t>(like.device().index()) * 2 + (like.scalar_type() == torch::kBFloat16 ? 1 : 0);
  if (cache.size() <= index) cache.resize(index + 1);
  torch::Tensor& ones = cache[index];
  if (!ones.defined() || ones.numel() < tokens) {
    ones = torch::ones({std::max<int64_t>(tokens, 1 << 16)}, like.options());
  }
  return ones;
}

}  // namespace

void accumulate_weight_grads(const torch::Tensor& dy, const torch::Tensor& x, const torch::Tensor& weight_slot,
                             const torch::Tensor& bias_slot, torch::ScalarType dtype) {
  const int64_t tokens = x.size(0), in = x.size(1), out = dy.size(1);
  ZEST_CHECK(dy.is_contiguous() && x.is_contiguous() && dy.size(0) == tokens,
             "weight gradient: dY and X must be contiguous [tokens, ·] with the same tokens");
  ZEST_CHECK(weight_slot.size(0) == out && weight_slot.size(1) == in && weight_slot.stride(1) == 1 &&
                 weight_slot.stride(0) >= in,
             "weight gradient: the slot must be [out, in] with contiguous rows");
  // Row-major dW [out, in] is column-major [in, out]: dWᵀ += Xᵀ·dY, X column-major [in, tokens]. Named for
  // the profiler and the FLOP counter as dYᵀ [out, tokens] @ X [tokens, in].
  {
    RECORD_FUNCTION("zest::mm_accumulate", std::vector<c10::IValue>({dy.t(), x}));
    gemm_accumulate(CUBLAS_OP_N, CUBLAS_OP_T, in, out, tokens, x.data_ptr(), in, dy.data_ptr(), out, weight_slot,
                    weight_slot.stride(0), dtype);
  }
  if (bias_slot.defined()) {  // db [out] += dY column-major [out, tokens] · 1 [tokens]
    gemm_accumulate(CUBLAS_OP_N, CUBLAS_OP_N, out, 1, tokens, dy.data_ptr(), out, ones_column(tokens, dy).data_ptr(),
                    tokens, bias_slot, out, dtype);
  }
}

}  // namespace zest
