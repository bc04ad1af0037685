// [engine.kernels] sdpa_backend = auto | cudnn | efficient | flash | math (ZEST_SDPA_BACKEND overrides): the one
// fused attention LibTorch may choose, for benchmarks and diagnosis; auto leaves LibTorch's choice as it is.
#include "core/kernel_switches.h"

#include <ATen/Context.h>

#include <string>

namespace zest {

void apply_sdpa_backend() {
  const std::string backend = kernel_switch("sdpa_backend").value();  // one of the switch's choices
  if (backend == "auto") return;
  auto& context = at::globalContext();
  context.setSDPUseCuDNN(backend == "cudnn");
  context.setSDPUseMemEfficient(backend == "efficient");
  context.setSDPUseFlash(backend == "flash");
  context.setSDPUseMath(backend == "math");
}

}  // namespace zest
