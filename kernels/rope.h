// Rotary position embedding with interleaved pairs (HY-Motion's RoPE) as CUDA kernels without LibTorch
// (nvcc compiles them; kernels/rope_cuda.cpp is the tensor glue): x [B, S, H, d] contiguous, the
// first `rotated` positions of S rotated by the float32 tables cos/sin [rotated, d], the rest copied.
// Each product and sum is rounded in float32 as the op-by-op form rounds it, then once to x's dtype, so
// the values are the same; backward needs only the tables.
#pragma once

#include "kernels/kernel_dtype.h"

#include <cstdint>

namespace zest {

struct RopeShape {
  int64_t batch = 0, seq = 0, heads = 0, head_dim = 0, rotated = 0;
  int vector_width = 2;  // elements per thread access: even, divides head_dim
};

// The widest access (8, 4 or 2 elements, at most 16 bytes) that head_dim and the pointers allow; 0 for
// an odd head_dim.
int rope_vector_width(int64_t head_dim, int element_bytes, const void* const* pointers, int num_pointers);

// y = x·cos + rotate_pairs(x)·sin on the rotated positions, x elsewhere.
void launch_rope_forward(const RopeShape& shape, KernelDtype dtype, const void* x, const float* cos, const float* sin,
                         void* y, void* cuda_stream);
// dx from dy: the transpose of the rotation (dy elsewhere).
void launch_rope_backward(const RopeShape& shape, KernelDtype dtype, const void* dy, const float* cos,
                          const float* sin, void* dx, void* cuda_stream);

}  // namespace zest
