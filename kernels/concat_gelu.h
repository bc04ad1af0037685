// [left | GELU_tanh(right)] along the last dimension as one CUDA kernel each way, without LibTorch (nvcc
// compiles them; kernels/concat_gelu_cuda.cpp is the tensor glue): HY-Motion's single-stream block
// feeds its second linear the attention output beside the activated MLP half of its first linear's
// output, which the op-by-op form runs as an activation over a strided slice and a concatenation (and, in
// backward, the activation's gradient over a strided slice). Forward rounds the activation once to the
// activation dtype, as GELU's own kernel does; backward gives right's gradient (left's is a view of the
// output's gradient).
#pragma once

#include "kernels/kernel_dtype.h"

#include <cstdint>

namespace zest {

// rows rows of left (left_width wide, rows left_stride apart) and right (right_width, right_stride apart);
// out: [rows, left_width + right_width] contiguous.
struct ConcatRows {
  int64_t rows = 0, left_width = 0, right_width = 0;
  int64_t left_stride = 0, right_stride = 0;
  int64_t width() const { return left_width + right_width; }
};

// The widest pack (8, 4, 2 or 1 elements, at most 16 bytes) that the widths, row strides and pointers allow.
int concat_gelu_vector_width(const ConcatRows& rows, int element_bytes, const void* const* pointers, int num_pointers);

void launch_concat_gelu_forward(const ConcatRows& rows, int vector_width, KernelDtype dtype, const void* left,
                                const void* right, void* out, void* cuda_stream);
// d_out [rows, width] contiguous → d_right [rows, right_width] contiguous.
void launch_concat_gelu_backward(const ConcatRows& rows, int vector_width, KernelDtype dtype, const void* d_out,
                                 const void* right, void* d_right, void* cuda_stream);

}  // namespace zest
