// HY-Motion's attention inputs from its qkv projections in one kernel each way (nvcc compiles them;
// kernels/qk_norm_rope_cuda.cpp is the tensor glue): per-head RMSNorm of q and k (float32
// statistics, rounded to the activation dtype before the weight multiplies it), then RoPE with
// interleaved pairs on the first `rotated` positions of the joint sequence, written with v into
// [B, S, H, d] tensors; one or two streams (the double block's motion and text) laid end to end along S.
// With one stream v is not copied: the caller views it in the projection (as the op chain does).
// It replaces the split of the projection (and its backward stack), the two norms, the stream
// concatenations and the two RoPE passes; the rounding of every step is the op chain's. Backward writes
// each stream's projection gradient [B, S_i, 3·H·d] in one pass and sums the norm weights' gradients in a
// fixed order.
#pragma once

#include "kernels/kernel_dtype.h"

#include <cstdint>

namespace zest {

struct QkvStream {
  const void* proj = nullptr;  // [B, seq, 3·H·d] with the last dim contiguous: q | k | v, head-major
  int64_t seq = 0;
  int64_t stride_b = 0, stride_s = 0;  // elements
  const void* q_weight = nullptr;       // [d]
  const void* k_weight = nullptr;       // [d]
  void* dproj = nullptr;                // backward: [B, seq, 3·H·d] contiguous
};

struct QkvShape {
  int64_t batch = 0, heads = 0, head_dim = 0;
  int64_t rotated = 0;  // positions [0, rotated) of the joint sequence take RoPE
  int streams = 1;      // 1 or 2
  QkvStream stream[2];
  int64_t seq() const { return stream[0].seq + (streams > 1 ? stream[1].seq : 0); }
  int64_t rows() const { return batch * seq() * heads; }
};

// Whether the kernels take this head dim and element size: every head dim from 8 to 256 that is a whole
// number of 16-byte accesses (a multiple of 8 in 16-bit dtypes, of 4 in float32; of 8 in float32 past
// 128), a row spread over a power-of-two group of at most 32 lanes; and the alignment every projection
// row and pointer needs, in elements.
bool qk_norm_rope_covers(int64_t head_dim, int element_bytes);
int64_t qk_norm_rope_alignment(int element_bytes);
int64_t qk_norm_rope_scratch(const QkvShape& shape, int element_bytes);  // floats

// q, k, v [B, S, H, d] contiguous (v null: not written); rstd_q, rstd_k float [B·S·H]; cos/sin float
// [rotated, d].
void launch_qk_norm_rope_forward(const QkvShape& shape, KernelDtype dtype, const float* cos, const float* sin,
                                 double eps, void* q, void* k, void* v, float* rstd_q, float* rstd_k,
                                 void* cuda_stream);
// dq, dk, dv [B, S, H, d] contiguous → every stream's dproj; dweights float [streams·2·d]: stream 0's q and
// k weight gradients, then stream 1's.
void launch_qk_norm_rope_backward(const QkvShape& shape, KernelDtype dtype, const float* cos, const float* sin,
                                  const void* dq, const void* dk, const void* dv, const float* rstd_q,
                                  const float* rstd_k, float* dweights, float* scratch, void* cuda_stream);

}  // namespace zest
