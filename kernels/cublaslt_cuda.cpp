// The shared cuBLASLt entry points and calls (see cublaslt.h).
#include "kernels/cublaslt.h"

#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>

#include <cuda_runtime.h>
#include <dlfcn.h>

#include <cstdlib>
#include <limits>
#include <string>

namespace zest {
namespace {

template <typename Fn>
Fn lookup(const char* name) {
  return reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, name));
}

CublasLtApi looked_up() {
  CublasLtApi api;
  api.desc_create = lookup<decltype(api.desc_create)>("cublasLtMatmulDescCreate");
  api.desc_set = lookup<decltype(api.desc_set)>("cublasLtMatmulDescSetAttribute");
  api.layout_create = lookup<decltype(api.layout_create)>("cublasLtMatrixLayoutCreate");
  api.preference_create = lookup<decltype(api.preference_create)>("cublasLtMatmulPreferenceCreate");
  api.preference_set = lookup<decltype(api.preference_set)>("cublasLtMatmulPreferenceSetAttribute");
  api.preference_destroy = lookup<decltype(api.preference_destroy)>("cublasLtMatmulPreferenceDestroy");
  api.heuristic = lookup<decltype(api.heuristic)>("cublasLtMatmulAlgoGetHeuristic");
  api.matmul = lookup<decltype(api.matmul)>("cublasLtMatmul");
  api.loaded = api.desc_create && api.desc_set && api.layout_create && api.preference_create && api.preference_set &&
               api.preference_destroy && api.heuristic && api.matmul;
  return api;
}

}  // namespace

const CublasLtApi& cublas_lt() {
  static const CublasLtApi api = looked_up();
  return api;
}

bool fit_16bit_epilogue_product(std::initializer_list<const at::Tensor*> operands) {
  if (!cublas_lt().loaded) return false;
  const auto dtype = (*operands.begin())->scalar_type();
  if (dtype != at::kBFloat16 && dtype != at::kHalf) return false;
  for (const at::Tensor* t : operands) {
    if (!t->is_cuda() || t->scalar_type() != dtype || common_alignment({t->data_ptr()}) < 16) return false;
    if (t->dim() == 2 && (t->stride(1) != 1 || t->stride(0) % 8 != 0)) return false;
    if (t->dim() == 1 && !t->is_contiguous()) return false;
  }
  return true;
}

cudaDataType cuda_16bit_type_of(const at::Tensor& t) {
  return t.scalar_type() == at::kBFloat16 ? CUDA_R_16BF : CUDA_R_16F;
}

uint32_t common_alignment(std::initializer_list<const void*> pointers) {
  uint32_t alignment = 256;
  for (const void* p : pointers) {
    while (reinterpret_cast<uintptr_t>(p) % alignment != 0) alignment /= 2;
  }
  return alignment;
}

namespace {

// cuBLASLt's heuristic: up to `count` algorithms into `results`, `*returned` of them; false when the call failed
// (`*status`, when given, has its status: CUBLAS_STATUS_NOT_SUPPORTED for a success with nothing found).
bool heuristic_results(cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                       cublasLtMatrixLayout_t d, uint32_t alignment, int count,
                       cublasLtMatmulHeuristicResult_t* results, int* returned, cublasStatus_t* status = nullptr) {
  const CublasLtApi& api = cublas_lt();
  *returned = 0;
  cublasLtMatmulPreference_t preference = nullptr;
  if (api.preference_create(&preference) != CUBLAS_STATUS_SUCCESS) return false;
  const uint64_t max_workspace = at::cuda::getCUDABlasLtWorkspaceSize();
  bool ok = api.preference_set(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_workspace,
                               sizeof(max_workspace)) == CUBLAS_STATUS_SUCCESS;
  for (const auto attribute : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                               CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES}) {
    ok = ok && api.preference_set(preference, attribute, &alignment, sizeof(alignment)) == CUBLAS_STATUS_SUCCESS;
  }
  const cublasStatus_t heuristic_status =
      ok ? api.heuristic(at::cuda::getCurrentCUDABlasLtHandle(), op, a, b, d, d, preference, count, results, returned)
         : CUBLAS_STATUS_INVALID_VALUE;
  api.preference_destroy(preference);
  if (status != nullptr) {
    *status = heuristic_status == CUBLAS_STATUS_SUCCESS && *returned == 0 ? CUBLAS_STATUS_NOT_SUPPORTED : heuristic_status;
  }
  return heuristic_status == CUBLAS_STATUS_SUCCESS && *returned > 0;
}

// The fastest of `candidates` (not empty), as settle_algorithm says.
cublasLtMatmulHeuristicResult_t fastest_algorithm(
    const std::vector<cublasLtMatmulHeuristicResult_t>& candidates,
    const std::function<bool(const cublasLtMatmulHeuristicResult_t&)>& run) {
  const at::cuda::CUDAStream stream = at::cuda::getCurrentCUDAStream();
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  if (candidates.size() == 1 || cudaStreamIsCapturing(stream, &capturing) != cudaSuccess ||
      capturing != cudaStreamCaptureStatusNone) {
    return candidates.front();
  }
  constexpr int kTimedCalls = 3;
  cublasLtMatmulHeuristicResult_t fastest = candidates.front();
  float fastest_ms = std::numeric_limits<float>::infinity();
  for (const auto& candidate : candidates) {
    if (!run(candidate)) continue;  // the warm-up call, and a refused candidate is passed over
    at::cuda::CUDAEvent start(cudaEventDefault), end(cudaEventDefault);  // timing events
    start.record(stream);
    for (int i = 0; i < kTimedCalls; ++i) run(candidate);
    end.record(stream);
    end.synchronize();
    const float ms = start.elapsed_time(end);
    if (ms < fastest_ms) {
      fastest_ms = ms;
      fastest = candidate;
    }
  }
  return fastest;
}

}  // namespace

bool best_algorithm(cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                    cublasLtMatrixLayout_t d, uint32_t alignment, cublasLtMatmulHeuristicResult_t* algorithm,
                    cublasStatus_t* status) {
  int returned = 0;
  return heuristic_results(op, a, b, d, alignment, 1, algorithm, &returned, status);
}

std::vector<cublasLtMatmulHeuristicResult_t> candidate_algorithms(cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t a,
                                                                  cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t d,
                                                                  uint32_t alignment) {
  std::vector<cublasLtMatmulHeuristicResult_t> found(kAutotuneCandidates);
  int returned = 0;
  if (!heuristic_results(op, a, b, d, alignment, kAutotuneCandidates, found.data(), &returned)) return {};
  found.resize(static_cast<size_t>(returned));
  return found;
}

bool autotune_algorithms() {
  static const bool on = [] {
    const char* value = std::getenv("ZEST_LT_AUTOTUNE");
    return value != nullptr && std::string(value) == "1";
  }();
  return on;
}

void settle_algorithm(std::vector<cublasLtMatmulHeuristicResult_t>& candidates,
                      cublasLtMatmulHeuristicResult_t& algorithm,
                      const std::function<bool(const cublasLtMatmulHeuristicResult_t&)>& run) {
  if (candidates.empty()) return;
  algorithm = fastest_algorithm(candidates, run);
  candidates.clear();
}

cublasStatus_t matmul_status(cublasLtMatmulDesc_t op, const cublasLtMatmulHeuristicResult_t& algorithm, const void* a,
                             cublasLtMatrixLayout_t a_layout, const void* b, cublasLtMatrixLayout_t b_layout,
                             float beta, const void* c, void* d, cublasLtMatrixLayout_t d_layout) {
  const float one = 1.0f;
  return cublas_lt().matmul(at::cuda::getCurrentCUDABlasLtHandle(), op, &one, a, a_layout, b, b_layout, &beta, c,
                            d_layout, d, d_layout, &algorithm.algo, at::cuda::getCUDABlasLtWorkspace(),
                            at::cuda::getCUDABlasLtWorkspaceSize(), at::cuda::getCurrentCUDAStream());
}

cublasStatus_t matmul_status(cublasLtMatmulDesc_t op, const cublasLtMatmulHeuristicResult_t& algorithm, const void* a,
                             cublasLtMatrixLayout_t a_layout, const void* b, cublasLtMatrixLayout_t b_layout,
                             float beta, void* d, cublasLtMatrixLayout_t d_layout) {
  return matmul_status(op, algorithm, a, a_layout, b, b_layout, beta, d, d, d_layout);
}

bool run_matmul(cublasLtMatmulDesc_t op, const cublasLtMatmulHeuristicResult_t& algorithm, const void* a,
                cublasLtMatrixLayout_t a_layout, const void* b, cublasLtMatrixLayout_t b_layout, float beta, void* d,
                cublasLtMatrixLayout_t d_layout) {
  return matmul_status(op, algorithm, a, a_layout, b, b_layout, beta, d, d_layout) == CUBLAS_STATUS_SUCCESS;
}

}  // namespace zest
