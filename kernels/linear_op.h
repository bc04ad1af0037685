// linear(x, weight, bias): the matrix product of every Linear layer, with gradient-accumulation fusion.
// On CUDA with 16-bit weights whose .grad is a slot of the engine's flat gradient buffer (float32, or the
// weight's own dtype when engine.reduce_dtype is the compute dtype), backward has cuBLAS accumulate
// dW += dYᵀ·X and db += Σ dY straight into those slots (beta = 1): no 16-bit weight-gradient temporary, no
// accumulation kernel per parameter (Megatron calls this gradient-accumulation fusion). Everywhere else —
// CPU, fp32, frozen weights, a .grad that is not such a slot — it is torch::linear with autograd's own
// accumulation.
#pragma once

#include <torch/torch.h>

namespace zest {

// weight: [out, in]; on the accumulating path (uses_accumulating_linear) also a pointwise convolution's
// [out, in, 1, 1], so a 1×1 convolution over channels-last activations runs as this product over its
// [pixels, in] rows, its gradients accumulated into the convolution's own .grad slots.
torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias);

// Whether linear() takes the accumulating path for these arguments (CUDA build, fusion enabled, grad
// mode, x and weight in one 16-bit dtype on CUDA, weight (and bias) trainable leaves). Whether a given
// backward then accumulates in place is decided when it runs: the .grad slots must exist by then.
bool uses_accumulating_linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias);
// The weight's half of that: whether backward through this weight and bias would accumulate in place.
bool accumulates_weight_grads(const torch::Tensor& weight, const torch::Tensor& bias);
// The parameters' conditions of every accumulating layer, whatever the weight's shape (a convolution's too,
// conv_op.h): a CUDA build, fusion enabled, grad mode, a trainable 16-bit weight on CUDA, and the bias, if
// any, a trainable [out] vector of the weight's dtype and device.
bool trains_into_grad_slots(const torch::Tensor& weight, const torch::Tensor& bias);

// Process-wide switch ([engine.kernels] linear_grad_fusion, default on; ZEST_LINEAR_GRAD_FUSION=0 overrides),
// so tests and benchmarks can compare against the unfused path in one process.
bool linear_grad_fusion_enabled();
void set_linear_grad_fusion(bool enabled);

// Backward calls of the accumulating path that accumulated into .grad slots / fell back to returning
// gradients, since the process started (tests check that the fused path really ran).
struct LinearGradFusionCounts {
  int64_t fused = 0;
  int64_t unfused = 0;
};
LinearGradFusionCounts linear_grad_fusion_counts();

}  // namespace zest
