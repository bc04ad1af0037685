// linear_plus(x, W, b, r) = linear(x, W, b) + r: a Linear's output added to its residual stream (the UNet
// transformer blocks' attention outputs, the Transformer2D's proj_out, a resnet's 1×1 shortcut). On CUDA, where
// linear() accumulates its gradients (linear_op.h), one product reads r as its C and adds the bias in its epilogue
// (residual_epilogue_gemm.h), so the sum is never a pass of its own; backward is linear()'s, and r's gradient is
// the output's. Elsewhere (and with [engine.kernels] residual_epilogue = false, or fp8 products) linear and an add.
#pragma once

#include <torch/torch.h>

namespace zest {

// residual: the output's shape (x's with the last dim W's rows) in x's dtype.
torch::Tensor linear_plus(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                          const torch::Tensor& residual);

// Whether linear_plus takes the one-product path for these arguments (it may still fall back when cuBLASLt
// refuses the shapes, counted under the fused path "residual_epilogue").
bool uses_residual_epilogue(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                            const torch::Tensor& residual);

// Process-wide switch ([engine.kernels] residual_epilogue, default on; ZEST_RESIDUAL_EPILOGUE=0 overrides).
bool residual_epilogue_enabled();
void set_residual_epilogue(bool enabled);

}  // namespace zest
