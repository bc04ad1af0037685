// shared_input_linear(x, {Wᵢ}, {bᵢ}) = {linear(x, Wᵢ, bᵢ)}: several Linear layers reading one input — a UNet
// self-attention's to_q, to_k and to_v. On CUDA, where linear() accumulates its gradients (linear_op.h), backward
// adds every dYᵢ·Wᵢ into one dX buffer (cuBLAS, beta = 1) where autograd would write each layer's dX and add
// them in passes of their own, and each layer's weight and bias gradients go into its .grad slots. Elsewhere
// (and with [engine.kernels] shared_input_linear = false) the layers one by one.
#pragma once

#include <torch/torch.h>

#include <vector>

namespace zest {

// biases: one per weight, undefined for a layer without one (or empty: none has one).
std::vector<torch::Tensor> shared_input_linear(const torch::Tensor& x, const std::vector<torch::Tensor>& weights,
                                               const std::vector<torch::Tensor>& biases);

// Whether shared_input_linear takes its joined backward for these layers (the switch on, and every layer on
// linear()'s accumulating path).
bool uses_shared_input_linear(const torch::Tensor& x, const std::vector<torch::Tensor>& weights,
                              const std::vector<torch::Tensor>& biases);

// Process-wide switch ([engine.kernels] shared_input_linear, default on; ZEST_SHARED_INPUT_LINEAR=0 overrides).
bool shared_input_linear_enabled();
void set_shared_input_linear(bool enabled);

}  // namespace zest
