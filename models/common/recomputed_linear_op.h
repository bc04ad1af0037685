// linear_of_recomputed(f, a, b, W, bias) = linear(f(a[, b]), W, bias) for an activation f that costs less
// to recompute than to keep: the MLP's GELU before its second Linear, the UNet's GEGLU before the
// feed-forward's output Linear, HY-Motion's [attention | GELU(MLP half)] before linear2. Autograd would
// keep f's output (the next Linear's input, the widest activation of the block) until backward; here
// only f's inputs are kept — which their producers keep anyway — and backward runs f again before the
// Linear's weight gradient (accumulated into its .grad slot as linear_op.h does). The same kernels run
// either way, so values and gradients are the unfused ones. CUDA, 16-bit, training only; elsewhere (and
// with ZEST_RECOMPUTE_ACTIVATIONS=0) the plain composition.
#pragma once

#include <torch/torch.h>

namespace zest {

enum class RecomputedActivation {
  gelu,              // f(a) = GELU(a), erf form
  gelu_tanh,         // f(a) = GELU(a), tanh approximation
  silu,              // f(a) = SiLU(a)
  geglu,             // f(a) = geglu(a) (geglu_op.h)
  concat_gelu_tanh,  // f(a, b) = [a | GELU_tanh(b)] (concat_gelu_op.h)
};

// b only for concat_gelu_tanh.
torch::Tensor linear_of_recomputed(RecomputedActivation f, const torch::Tensor& a, const torch::Tensor& b,
                                   const torch::Tensor& weight, const torch::Tensor& bias);

// f itself, as the unfused path runs it.
torch::Tensor apply_activation(RecomputedActivation f, const torch::Tensor& a, const torch::Tensor& b);

bool uses_recomputed_linear(const torch::Tensor& a, const torch::Tensor& weight, const torch::Tensor& bias);

// Process-wide switch (default on; ZEST_RECOMPUTE_ACTIVATIONS=0 turns it off), for tests and A/B runs.
bool activation_recompute_enabled();
void set_activation_recompute(bool enabled);

}  // namespace zest
