// The shared cuBLASLt entry points and calls (see cublaslt.h).
#include "kernels/cublaslt.h"

#include <ATen/cuda/CUDAContext.h>

#include <dlfcn.h>

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

uint32_t common_alignment(std::initializer_list<const void*> pointers) {
  uint32_t alignment = 256;
  for (const void* p : pointers) {
    while (reinterpret_cast<uintptr_t>(p) % alignment != 0) alignment /= 2;
  }
  return alignment;
}

bool best_algorithm(cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                    cublasLtMatrixLayout_t d, uint32_t alignment, cublasLtMatmulHeuristicResult_t* algorithm,
                    cublasStatus_t* status) {
  const CublasLtApi& api = cublas_lt();
  cublasLtMatmulPreference_t preference = nullptr;
  if (api.preference_create(&preference) != CUBLAS_STATUS_SUCCESS) return false;
  const uint64_t max_workspace = at::cuda::getCUDABlasLtWorkspaceSize();
  bool ok = api.preference_set(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_workspace,
                               sizeof(max_workspace)) == CUBLAS_STATUS_SUCCESS;
  for (const auto attribute : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                               CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES}) {
    ok = ok && api.preference_set(preference, attribute, &alignment, sizeof(alignment)) == CUBLAS_STATUS_SUCCESS;
  }
  int found = 0;
  const cublasStatus_t heuristic_status =
      ok ? api.heuristic(at::cuda::getCurrentCUDABlasLtHandle(), op, a, b, d, d, preference, 1, algorithm, &found)
         : CUBLAS_STATUS_INVALID_VALUE;
  api.preference_destroy(preference);
  if (status != nullptr) {
    *status = heuristic_status == CUBLAS_STATUS_SUCCESS && found == 0 ? CUBLAS_STATUS_NOT_SUPPORTED : heuristic_status;
  }
  return heuristic_status == CUBLAS_STATUS_SUCCESS && found > 0;
}

cublasStatus_t matmul_status(cublasLtMatmulDesc_t op, const cublasLtMatmulHeuristicResult_t& algorithm, const void* a,
                             cublasLtMatrixLayout_t a_layout, const void* b, cublasLtMatrixLayout_t b_layout,
                             float beta, void* d, cublasLtMatrixLayout_t d_layout) {
  const float one = 1.0f;
  return cublas_lt().matmul(at::cuda::getCurrentCUDABlasLtHandle(), op, &one, a, a_layout, b, b_layout, &beta, d,
                            d_layout, d, d_layout, &algorithm.algo, at::cuda::getCUDABlasLtWorkspace(),
                            at::cuda::getCUDABlasLtWorkspaceSize(), at::cuda::getCurrentCUDAStream());
}

bool run_matmul(cublasLtMatmulDesc_t op, const cublasLtMatmulHeuristicResult_t& algorithm, const void* a,
                cublasLtMatrixLayout_t a_layout, const void* b, cublasLtMatrixLayout_t b_layout, float beta, void* d,
                cublasLtMatrixLayout_t d_layout) {
  return matmul_status(op, algorithm, a, a_layout, b, b_layout, beta, d, d_layout) == CUBLAS_STATUS_SUCCESS;
}

}  // namespace zest
