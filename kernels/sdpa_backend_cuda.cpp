// ZEST_SDPA_BACKEND = cudnn | efficient | flash | math: the one fused attention LibTorch may choose, for
// benchmarks and diagnosis (`zest bench`); unset, LibTorch chooses as it always does.
#include "core/check.h"

#include <ATen/Context.h>

#include <cstdlib>
#include <string>

namespace zest {

void apply_sdpa_backend_from_env() {
  const char* value = std::getenv("ZEST_SDPA_BACKEND");
  if (value == nullptr || *value == '\0') return;
  const std::string backend = value;
  ZEST_CHECK(backend == "cudnn" || backend == "efficient" || backend == "flash" || backend == "math",
             "ZEST_SDPA_BACKEND must be cudnn, efficient, flash or math, got '", backend, "'");
  auto& context = at::globalContext();
  context.setSDPUseCuDNN(backend == "cudnn");
  context.setSDPUseMemEfficient(backend == "efficient");
  context.setSDPUseFlash(backend == "flash");
  context.setSDPUseMath(backend == "math");
}

}  // namespace zest
