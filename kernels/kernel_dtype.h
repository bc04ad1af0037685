// The activation dtypes zest's model kernels (*.cu in kernels/) are instantiated for, named without
// LibTorch so nvcc-compiled files can take them.
#pragma once

namespace zest {

enum class KernelDtype : int { fp32 = 0, bf16 = 1, fp16 = 2 };

}  // namespace zest
