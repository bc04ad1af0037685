// GEGLU, hidden · GELU(gate) with [hidden ; gate] = the halves of a projection's last dimension, as one
// CUDA kernel each way (nvcc compiles them; kernels/geglu_cuda.cpp is the tensor glue): forward
// reads the projection once and writes the product; backward reads the projection and the product's
// gradient once and writes the projection's gradient whole — where the op-by-op form runs five kernels
// and a concatenation and keeps GELU(gate) alive for backward. Exact (erf) GELU; every intermediate is
// rounded to the activation dtype as the op-by-op form rounds it, so the values are the same.
#pragma once

#include "kernels/kernel_dtype.h"

#include <cstdint>

namespace zest {

// The widest access (8, 4, 2 or 1 elements, at most 16 bytes) that `inner` and the pointers allow.
int geglu_vector_width(int64_t inner, int element_bytes, const void* const* pointers, int num_pointers);

// proj [rows, 2·inner] → out [rows, inner].
void launch_geglu_forward(int64_t rows, int64_t inner, int vector_width, KernelDtype dtype, const void* proj,
                          void* out, void* cuda_stream);
// (proj, d_out) → d_proj [rows, 2·inner].
void launch_geglu_backward(int64_t rows, int64_t inner, int vector_width, KernelDtype dtype, const void* proj,
                           const void* d_out, void* d_proj, void* cuda_stream);

}  // namespace zest
