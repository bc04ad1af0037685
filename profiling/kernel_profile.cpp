// KernelProfile (see kernel_profile.h); the recording itself is in kernel_profile_cuda.cpp.
#include "profiling/kernel_profile.h"

#include "core/check.h"

namespace zest {

#ifdef ZEST_WITH_CUDA
void start_cuda_kernel_profile();
void stop_cuda_kernel_profile();
nlohmann::json finish_cuda_kernel_profile(int steps, const std::string& table_path, int top, ChromeTrace* trace);
#endif

KernelProfile::KernelProfile() {
#ifdef ZEST_WITH_CUDA
  start_cuda_kernel_profile();
  recording_ = true;
#else
  ZEST_FAIL("bench: --profile records GPU kernels; this zest was built without CUDA");
#endif
}

KernelProfile::~KernelProfile() {
#ifdef ZEST_WITH_CUDA
  if (recording_) stop_cuda_kernel_profile();  // unwinding: stop without a summary
#endif
}

nlohmann::json KernelProfile::finish(int steps, const std::string& table_path, int top, ChromeTrace* trace) {
  ZEST_CHECK(recording_, "bench: the kernel profile was already finished");
  recording_ = false;
#ifdef ZEST_WITH_CUDA
  return finish_cuda_kernel_profile(steps, table_path, top, trace);
#else
  (void)steps, (void)table_path, (void)top, (void)trace;
  return {};
#endif
}

}  // namespace zest
