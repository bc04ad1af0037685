// LinearLayer: the one seam every model Linear goes through. It decides, in one place, how the product runs
// — the accumulating (fused-gradient) product (kernels/linear_op.h), the two-product split and joined forms
// (kernels/split_linear_op.h, kernels/joined_linear_op.h), an activation recomputed in backward
// (kernels/recomputed_linear_op.h), or torch::linear — and it is where a layer's LoRA adapter attaches
// (low_rank_adapter.h; a later fp8 or quantised base attaches here too). The families' Linear modules
// derive from it and add only their initialisation; blocks ask the layer for the form they need instead of
// calling the ops with its tensors.
#pragma once

#include "kernels/recomputed_linear_op.h"
#include "models/common/low_rank_adapter.h"

#include <torch/torch.h>

#include <memory>
#include <vector>

namespace zest {

class LinearLayer : public torch::nn::Module {
 public:
  // x·Wᵀ + b (+ the adapter's delta); x is cast to the weights' dtype first, as autocast does (float32
  // inputs, sinusoids and norm outputs meet 16-bit weights).
  torch::Tensor forward(const torch::Tensor& x) const;

  // forward(x) split along its last dim into parts of `sizes` (HY-Motion's linear1: [q | k | v | MLP half]).
  // With gelu_of_last, one more element: GELU_tanh of the last part where a GEMM epilogue made it, else
  // undefined (split_linear_with_gelu_of_last). x must already be in the weights' dtype.
  std::vector<torch::Tensor> forward_split(const torch::Tensor& x, const std::vector<int64_t>& sizes,
                                           bool gelu_of_last = false) const;

  // forward(f(a[, b])): f is recomputed in backward rather than kept where recomputes(f, a) says so.
  // activated: f(a) where an epilogue already made it (forward_split's last element), else undefined.
  torch::Tensor forward_of_activation(RecomputedActivation f, const torch::Tensor& a, const torch::Tensor& b = {},
                                      const torch::Tensor& activated = {}) const;
  // Whether forward_of_activation recomputes f for this input (never with an adapter: its input is kept).
  bool recomputes(RecomputedActivation f, const torch::Tensor& a) const;

  // forward([left | GELU_tanh(right)]) without writing the concatenation where the two-product form applies
  // (HY-Motion's single-block linear2). activated: GELU_tanh(right) when already made, else undefined.
  torch::Tensor forward_joined_gelu(const torch::Tensor& left, const torch::Tensor& right,
                                    const torch::Tensor& activated = {}) const;

  // forward(x) + residual, the sum made in the product (kernels/residual_linear_op.h) where no adapter is attached.
  torch::Tensor forward_plus(const torch::Tensor& x, const torch::Tensor& residual) const;

  // {layer->forward(x) for each layer}: layers reading one input (a self-attention's q, k, v). Where none has
  // an adapter, backward adds their input gradients into one buffer (kernels/shared_input_linear_op.h).
  static std::vector<torch::Tensor> forward_shared_input(const torch::Tensor& x,
                                                         const std::vector<const LinearLayer*>& layers);

  // ---- adapters ----
  // Adds a LoRA adapter (registers lora_A, lora_B; low_rank_adapter.h). One per layer.
  void attach_adapter(const LowRankShape& shape);
  bool has_adapter() const { return adapter_ != nullptr; }
  LowRankAdapter* adapter() const { return adapter_.get(); }
  // W += s·B·A (rounded once to W's dtype); the adapter stays attached with its output multiplied by 0, so
  // the layer computes what it did, from the folded weight.
  void fold_adapter_into_weight();
  int64_t in_features() const { return weight.size(1); }
  int64_t out_features() const { return weight.size(0); }

  torch::Tensor weight;  // [out, in]
  torch::Tensor bias;    // [out] or undefined

 protected:
  // Registers "weight" and, when defined, "bias" (the state-dict names of nn.Linear).
  void register_weights(torch::Tensor initial_weight, torch::Tensor initial_bias);

 private:
  torch::Tensor with_delta(const torch::Tensor& base_output, const torch::Tensor& input) const;

  std::unique_ptr<LowRankAdapter> adapter_;
};

}  // namespace zest
