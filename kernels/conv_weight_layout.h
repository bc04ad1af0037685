// A convolution weight between its parameter's layout [out, in, taps] (taps = kh·kw, contiguous as the
// engine's flat buffers hold it) and channels-last [out, taps, in] (what cuDNN convolves channels-last
// activations with), as CUDA kernels without LibTorch (nvcc compiles them; conv_op's CUDA glue calls them):
// a copy into channels-last for forward, and the channels-last weight gradient added into the parameter's
// .grad slot. Each block transposes one output channel's [in-tile, taps] through shared memory, so reads and
// writes both run along contiguous memory.
#pragma once

#include "kernels/kernel_dtype.h"

#include <cstdint>

namespace zest {

struct ConvWeightShape {
  int64_t out = 0, in = 0, taps = 0;
};

// Whether the kernels take this shape (taps ≤ 16, so a tile fits in shared memory).
bool conv_weight_layout_supports(const ConvWeightShape& shape);

// channels_last [out, taps, in] = weight [out, in, taps], both in `dtype`.
void launch_conv_weight_to_channels_last(const ConvWeightShape& shape, KernelDtype dtype, const void* weight,
                                         void* channels_last, void* cuda_stream);

// slot [out, in, taps] (slot_dtype: float32 or grad_dtype) += grad [out, taps, in] (grad_dtype), each sum in
// float32 and rounded once into the slot.
void launch_conv_weight_grad_accumulate(const ConvWeightShape& shape, KernelDtype grad_dtype, const void* grad,
                                        KernelDtype slot_dtype, void* slot, void* cuda_stream);

}  // namespace zest
