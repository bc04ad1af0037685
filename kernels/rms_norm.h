// RMSNorm over the last dimension of q or k [B, S, H, d] (HY-Motion's per-head qk norm) as CUDA kernels
// without LibTorch (nvcc compiles them; kernels/rms_norm_cuda.cpp is the tensor glue): one warp per
// row, float32 statistics, the result rounded to the activation dtype before the weight multiplies it,
// as the reference does; backward also reduces the weight's gradient in a fixed order.
#pragma once

#include "kernels/kernel_dtype.h"

#include <cstdint>

namespace zest {

// x's rows are (b, s, h) at b·stride_b + s·stride_s + h·stride_h; each row's d elements are contiguous.
struct RmsRows {
  int64_t batch = 0, seq = 0, heads = 0, head_dim = 0;
  int64_t stride_b = 0, stride_s = 0, stride_h = 0;
  int64_t rows() const { return batch * seq * heads; }
};

bool rms_norm_covers(int64_t head_dim);  // every head dim from 1 to 256
int64_t rms_norm_backward_scratch(const RmsRows& rows);  // floats

// y [rows, d] contiguous = bf16(x·rstd) · weight; rstd: float [rows], saved for backward.
void launch_rms_norm_forward(const RmsRows& rows, KernelDtype dtype, const void* x, const void* weight, double eps,
                             void* y, float* rstd, void* cuda_stream);
// dy [rows, d] contiguous → dx [rows, d] contiguous and dweight float [d].
void launch_rms_norm_backward(const RmsRows& rows, KernelDtype dtype, const void* dy, const void* x,
                              const void* weight, const float* rstd, void* dx, float* dweight, float* scratch,
                              void* cuda_stream);

}  // namespace zest
