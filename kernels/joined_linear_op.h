// joined_gelu_linear(left, right, W, b) = linear([left | GELU_tanh(right)], W, b): HY-Motion's single-stream
// linear2 over the attention output beside the activated MLP half. On CUDA, where linear() accumulates its
// gradients (linear_op.h), it runs as two products over the column blocks of W that the two inputs meet
// (y = left·W_leftᵀ + GELU(right)·W_rightᵀ + b, the second accumulated by cuBLAS with beta = 1): the
// concatenation is never written, backward hands left and right contiguous gradients of their own, and
// dW's column blocks and db go straight into the .grad slots. GELU(right) is kept for backward, or run
// again there when recomputes_here(concat_gelu_tanh) (recomputed_linear_op.h). Elsewhere (and with
// [engine.kernels] joined_linear = false) the composition, recomputed as linear_of_recomputed does.
#pragma once

#include <torch/torch.h>

namespace zest {

// left [.., Dl], right [.., Dr] with the same leading dims; weight [out, Dl + Dr], bias [out] or undefined.
// activated: GELU_tanh(right) where its producer already made it (split_linear_with_gelu_of_last), else
// undefined. On the two-product path, right's gradient comes from the product dY·W_right with cuBLASLt's
// GELU-backward epilogue where it can (gelu_epilogue_gemm.h).
torch::Tensor joined_gelu_linear(const torch::Tensor& left, const torch::Tensor& right, const torch::Tensor& weight,
                                 const torch::Tensor& bias, const torch::Tensor& activated = {});

// Process-wide switch ([engine.kernels] joined_linear, default on; ZEST_JOINED_LINEAR=0 overrides), for tests and
// A/B runs.
bool joined_linear_enabled();
void set_joined_linear(bool enabled);

}  // namespace zest
