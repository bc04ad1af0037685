// cuBLASLt as zest's own products call it (CUDA builds only; cublaslt_cuda.cpp): the copy LibTorch loaded,
// its entry points looked up in the process, used on LibTorch's cuBLASLt handle and workspace for the current
// stream. The GELU- and residual-epilogue products (gelu_epilogue_gemm_cuda.cpp, residual_epilogue_gemm_cuda.cpp)
// and the fp8 products (fp8_product_cuda.cpp) share it.
#pragma once

#include <ATen/core/Tensor.h>
#include <cublasLt.h>

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <vector>

namespace zest {

// The cuBLASLt entry points zest uses; `loaded` is false when the process has no cuBLASLt.
struct CublasLtApi {
  decltype(&cublasLtMatmulDescCreate) desc_create;
  decltype(&cublasLtMatmulDescSetAttribute) desc_set;
  decltype(&cublasLtMatrixLayoutCreate) layout_create;
  decltype(&cublasLtMatmulPreferenceCreate) preference_create;
  decltype(&cublasLtMatmulPreferenceSetAttribute) preference_set;
  decltype(&cublasLtMatmulPreferenceDestroy) preference_destroy;
  decltype(&cublasLtMatmulAlgoGetHeuristic) heuristic;
  decltype(&cublasLtMatmul) matmul;
  bool loaded = false;
};
const CublasLtApi& cublas_lt();

// Whether the 16-bit epilogue products may take these operands: cuBLASLt loaded; CUDA tensors of one 16-bit
// dtype with pointers 16-byte aligned, matrices with contiguous rows and leading dimensions a multiple of 8
// elements, vectors contiguous (what cuBLASLt's vectorised epilogues need).
bool fit_16bit_epilogue_product(std::initializer_list<const at::Tensor*> operands);
// cuBLASLt's type of a bf16 or fp16 tensor.
cudaDataType cuda_16bit_type_of(const at::Tensor& t);

// The largest power of two up to 256 that every pointer is a multiple of (what a plan tells the heuristic:
// by default it assumes 256 and may pick a kernel that needs it).
uint32_t common_alignment(std::initializer_list<const void*> pointers);

// The heuristic's best algorithm for these descriptors (C laid out as D), within LibTorch's workspace and
// for operands aligned to `alignment` bytes; false when it has none. `status`, when given, receives the
// heuristic's return status (CUBLAS_STATUS_SUCCESS with no algorithm found: CUBLAS_STATUS_NOT_SUPPORTED).
bool best_algorithm(cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                    cublasLtMatrixLayout_t d, uint32_t alignment, cublasLtMatmulHeuristicResult_t* algorithm,
                    cublasStatus_t* status = nullptr);

// The heuristic's first kAutotuneCandidates algorithms for these descriptors (as best_algorithm asks), its
// best first; empty when it has none.
constexpr int kAutotuneCandidates = 8;
std::vector<cublasLtMatmulHeuristicResult_t> candidate_algorithms(cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t a,
                                                                  cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t d,
                                                                  uint32_t alignment);

// Whether plans time the heuristic's candidates on their first product (ZEST_LT_AUTOTUNE=1, a measurement
// knob of issue 38's calls; off by default).
bool autotune_algorithms();

// A plan's first product with candidates left to time: `algorithm` becomes the fastest of them by the device's
// clock, each timed over a few calls of `run(algorithm)` (which launches the product on the current stream and
// returns whether cuBLASLt took it; a refused candidate is passed over), and `candidates` is emptied. While the
// current stream is capturing a CUDA graph (nothing may wait there) the heuristic's first is kept untimed.
// Nothing without candidates.
void settle_algorithm(std::vector<cublasLtMatmulHeuristicResult_t>& candidates,
                      cublasLtMatmulHeuristicResult_t& algorithm,
                      const std::function<bool(const cublasLtMatmulHeuristicResult_t&)>& run);

// cublasLtMatmul on the current stream with LibTorch's handle and workspace (D = alpha·op(A)·op(B) + beta·D);
// its status.
cublasStatus_t matmul_status(cublasLtMatmulDesc_t op, const cublasLtMatmulHeuristicResult_t& algorithm, const void* a,
                             cublasLtMatrixLayout_t a_layout, const void* b, cublasLtMatrixLayout_t b_layout,
                             float beta, void* d, cublasLtMatrixLayout_t d_layout);
// The same with C apart from D, laid out as D: D = alpha·op(A)·op(B) + beta·C.
cublasStatus_t matmul_status(cublasLtMatmulDesc_t op, const cublasLtMatmulHeuristicResult_t& algorithm, const void* a,
                             cublasLtMatrixLayout_t a_layout, const void* b, cublasLtMatrixLayout_t b_layout,
                             float beta, const void* c, void* d, cublasLtMatrixLayout_t d_layout);
// matmul_status(...) == CUBLAS_STATUS_SUCCESS.
bool run_matmul(cublasLtMatmulDesc_t op, const cublasLtMatmulHeuristicResult_t& algorithm, const void* a,
                cublasLtMatrixLayout_t a_layout, const void* b, cublasLtMatrixLayout_t b_layout, float beta, void* d,
                cublasLtMatrixLayout_t d_layout);

// The plan (descriptors and the heuristic's algorithm) for `shape`, made by make_plan(shape) the first time
// this thread asks and reused after: only the pointers change between calls. Plans live as long as the
// process (a few dozen shapes); a thread keeps its own, as cuBLASLt's descriptors are not shared.
template <typename Plan, typename Shape>
Plan& cached_plan(const Shape& shape, Plan (*make_plan)(const Shape&)) {
  thread_local std::map<decltype(shape.key()), Plan> plans;
  auto it = plans.find(shape.key());
  if (it == plans.end()) it = plans.emplace(shape.key(), make_plan(shape)).first;
  return it->second;
}

}  // namespace zest
