// The gated residual x + y·gate of HY-Motion's blocks (gate per sample, broadcast over the tokens) as
// CUDA kernels without LibTorch (nvcc compiles them; kernels/gated_residual_cuda.cpp is the tensor
// glue): forward rounds y·gate to the activation dtype and then the sum, as the two ops do; backward
// writes y's gradient and reduces the gate's over each sample's tokens in a fixed order (bitwise
// repeatable), in one pass over the gradient and y where the op chain takes a product, a second product
// and a sum.
#pragma once

#include "kernels/kernel_dtype.h"
#include "core/host_device.h"
#include "kernels/packed_samples.h"

#include <cstdint>

namespace zest {

// x, y, out: [batch, seq, dim] contiguous; gate of sample b at b·gate_stride_b + j (j < dim). Packed rows
// (`samples.starts` set): x, y, out are [samples.rows, dim], sample b's rows one after another
// (kernels/packed_samples.h), and seq is the longest sample's row count.
struct GatedRows {
  int64_t batch = 0, seq = 0, dim = 0;
  int64_t gate_stride_b = 0;
  PackedSamples samples;
  ZEST_HOST_DEVICE int64_t rows() const { return samples.starts ? samples.rows : batch * seq; }
};

// The widest pack (8, 4, 2 or 1 elements, at most 16 bytes) that dim and the row pointers allow.
int gated_residual_vector_width(int64_t dim, int element_bytes, const void* const* pointers, int num_pointers);
int64_t gated_residual_scratch(const GatedRows& rows, int vector_width);  // floats

void launch_gated_residual_forward(const GatedRows& rows, int vector_width, KernelDtype dtype, const void* x,
                                   const void* y, const void* gate, void* out, void* cuda_stream);
// d_out → d_y [rows, dim] and d_gate float [batch, dim] (x's gradient is d_out itself).
void launch_gated_residual_backward(const GatedRows& rows, int vector_width, KernelDtype dtype, const void* d_out,
                                    const void* y, const void* gate, void* d_y, float* d_gate, float* scratch,
                                    void* cuda_stream);

}  // namespace zest
