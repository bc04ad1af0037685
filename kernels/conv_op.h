// conv2d(x, weight, bias, stride, padding): the UNet's k×k convolutions. On CUDA over channels-last 16-bit
// activations with a trainable weight (conv_weight_layout.h), forward copies the weight into channels-last
// once with a transposing kernel and keeps that copy for backward (cuDNN would convert the weight again
// there), and backward adds the channels-last weight gradient straight into the weight's .grad slot of the
// engine's flat gradient buffer (float32, or the weight's dtype) and the bias gradient into the bias's —
// where autograd would add a channels-last gradient into a contiguous slot elementwise across layouts.
// Elsewhere (CPU, fp32, frozen weights) torch::conv2d. Off unless [engine.kernels] conv_grad_fusion = true (or ZEST_CONV_GRAD_FUSION=1): measured, it did
// not pay for the memory its kept copies take (conv_op.cpp).
#pragma once

#include <torch/torch.h>

namespace zest {

torch::Tensor conv2d(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias, int64_t stride,
                     int64_t padding);

// Whether conv2d takes the path above for these arguments.
bool uses_accumulating_conv(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias);

// Process-wide switch ([engine.kernels] conv_grad_fusion, default off; ZEST_CONV_GRAD_FUSION=1 overrides), for tests
// and A/B runs.
bool conv_grad_fusion_enabled();
void set_conv_grad_fusion(bool enabled);

}  // namespace zest
