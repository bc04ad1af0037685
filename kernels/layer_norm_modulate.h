// HY-Motion's modulated layer norm, y = LayerNorm(x)·(1 + scale) + shift with shift and scale per sample,
// as CUDA kernels without LibTorch (nvcc compiles them; kernels/layer_norm_modulate_cuda.cpp is the
// tensor glue): a block a row at a time, float32 statistics, (1 + scale) rounded to the activation dtype as the
// op chain computes it, the result rounded once; backward reduces shift's and scale's gradients over each
// sample's rows in a fixed order, so results repeat bitwise. The same kernels run an affine layer norm,
// LayerNorm(x)·weight + bias (`affine`: the weight multiplies as it is, every row one sample's): backward
// makes dx and the weight's and bias's gradients in one pass over x and dy, where ATen's reads both twice.
#pragma once

#include "kernels/kernel_dtype.h"
#include "core/host_device.h"
#include "kernels/packed_samples.h"

#include <cstdint>

namespace zest {

// x: [batch, seq, dim] contiguous; shift and scale of sample b at b·stride_b + j (j < dim). Packed rows
// (`samples.starts` set): x is [samples.rows, dim], sample b's rows one after another
// (kernels/packed_samples.h), and seq is the longest sample's row count.
struct ModulatedRows {
  int64_t batch = 0, seq = 0, dim = 0;
  int64_t shift_stride_b = 0, scale_stride_b = 0;
  PackedSamples samples;
  bool affine = false;  // scale multiplies as it is (an affine weight), not as 1 + scale
  ZEST_HOST_DEVICE int64_t rows() const { return samples.starts ? samples.rows : batch * seq; }
};

// A row spreads over whole warps of up to 512 threads, at most 16 elements each: every width from 1 to
// 8192 (evenly where a whole number of warps splits it, as HY-Motion's 1280, 2048 and 3072).
bool layer_norm_modulate_covers(int64_t dim);
int64_t layer_norm_modulate_scratch(const ModulatedRows& rows);  // floats

// y [rows, dim] contiguous; mean and rstd: float [rows], saved for backward.
void launch_layer_norm_modulate_forward(const ModulatedRows& rows, KernelDtype dtype, const void* x,
                                        const void* shift, const void* scale, double eps, void* y, float* mean,
                                        float* rstd, void* cuda_stream);
// dy [rows, dim] contiguous → dx [rows, dim] contiguous, dshift_dscale float [2][batch][dim] (shift's
// gradient, then scale's).
void launch_layer_norm_modulate_backward(const ModulatedRows& rows, KernelDtype dtype, const void* dy,
                                         const void* x, const void* scale, const float* mean, const float* rstd,
                                         void* dx, float* dshift_dscale, float* scratch, void* cuda_stream);

}  // namespace zest
