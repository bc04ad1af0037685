// Group norm (optionally followed by SiLU) over channels-last activations, as CUDA kernels without
// LibTorch (nvcc compiles them; kernels/group_norm_nhwc_cuda.cpp is the tensor glue). Activations
// and affine parameters in one dtype (fp32, bf16 or fp16), statistics and arithmetic in float32 — the
// values of ATen's float32 group norm, without the float32 copies of the activations around it. Every
// reduction runs in a fixed order, so results are deterministic.
// The norm may take a per-sample channel shift added to its input first (a UNet resnet's time embedding
// before its second norm): the sum is never written, and the shift's gradient comes from sums backward
// makes anyway, so the broadcast add and its gradient's pass over the activations are gone.
#pragma once

#include "kernels/kernel_dtype.h"

#include <cstdint>

namespace zest {

// [n, hw, c] in memory (an NCHW tensor with channels-last strides), `groups` groups of c / groups channels.
struct GroupNormShape {
  int64_t n = 0, hw = 0, c = 0, groups = 0;
  int vector_width = 1;  // channels per thread access: divides c; see group_norm_nhwc_vector_width
  int64_t chunks() const;  // row chunks of a sample, a block each
};

// The widest access (8, 4, 2 or 1 channels) that the channel count divides and the pointers' alignment
// allows, or 0 when the kernels do not cover this shape (groups not dividing c, or too many channels for a
// block: the caller falls back to ATen).
int group_norm_nhwc_vector_width(int64_t c, int64_t groups, int element_bytes, const void* const* pointers,
                                 int num_pointers);

// Scratch floats the passes need (the caller allocates them on the device).
int64_t group_norm_nhwc_forward_scratch(const GroupNormShape& shape);
int64_t group_norm_nhwc_backward_scratch(const GroupNormShape& shape);

// The optional shift of the norm's input: x + shift[n, c] at every pixel.
struct ChannelShift {
  const void* shift = nullptr;   // [n, c] in the activations' dtype; null: no shift
  float* channel_means = nullptr;  // forward writes [n, c], each channel's mean of x + shift; backward reads it
  float* dshift = nullptr;         // backward writes [n, c], the shift's gradient (Σ over the pixels of dx)
};

// y = norm(x [+ shift])·weight + bias (then SiLU); mean and rstd: float [n, groups], saved for backward.
void launch_group_norm_nhwc_forward(const GroupNormShape& shape, KernelDtype dtype, const void* x, const void* weight,
                                    const void* bias, double eps, bool silu, void* y, float* mean, float* rstd,
                                    const ChannelShift& shift, float* scratch, void* cuda_stream);

// From dy: dx (dtype, channels-last like x), dweight and dbias as float [c], and with a shift its gradient.
void launch_group_norm_nhwc_backward(const GroupNormShape& shape, KernelDtype dtype, const void* dy, const void* x,
                                     const float* mean, const float* rstd, const void* weight, const void* bias,
                                     bool silu, void* dx, float* dweight, float* dbias, const ChannelShift& shift,
                                     float* scratch, void* cuda_stream);

}  // namespace zest
