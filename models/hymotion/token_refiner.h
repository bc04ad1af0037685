// SingleTokenRefiner ("text_refiner"): a small gated self-attention transformer over the LLM text tokens,
// conditioned on the raw flow time and the pooled text (docs/models.md 1.6).
#pragma once

#include "models/hymotion/layers.h"

#include <torch/torch.h>

#include <vector>

namespace zest::hymotion {

// One IndividualTokenRefinerBlock: gated (no shift/scale) attention and MLP residuals.
class RefinerBlockImpl : public torch::nn::Module {
 public:
  RefinerBlockImpl(int64_t dim, int64_t num_heads, const RefinerConfig& cfg, int64_t mlp_hidden,
                   const Init& init);
  // h [B, T, D], c [B, 1, D], bias [B, 1, T, T] → [B, T, D].
  torch::Tensor forward(const torch::Tensor& h, const torch::Tensor& c, const torch::Tensor& bias) const;

 private:
  int64_t num_heads_;
  AffineLayerNorm norm1_{nullptr};
  Linear qkv_{nullptr};
  HeadNorm q_norm_{nullptr}, k_norm_{nullptr};
  Linear proj_{nullptr};
  AffineLayerNorm norm2_{nullptr};
  Mlp mlp_{nullptr};
  Modulation modulation_{nullptr};
};
TORCH_MODULE(RefinerBlock);

class TokenRefinerImpl : public torch::nn::Module {
 public:
  TokenRefinerImpl(const HyMotionConfig& cfg, const Init& init);
  // ctxt [B, T, D] (ctxt_encoder output), t [B] raw flow time, valid [B, T] bool → [B, T, D].
  torch::Tensor forward(const torch::Tensor& ctxt, const torch::Tensor& t, const torch::Tensor& valid) const;

 private:
  Linear input_embedder_{nullptr};
  MlpEncoder context_encoder_{nullptr};
  TimestepEncoder timestep_encoder_{nullptr};
  std::vector<RefinerBlock> blocks_;
};
TORCH_MODULE(TokenRefiner);

// Refiner self-attention bias [B, 1, T, T]: 0 where query and key are both valid, else −inf; a query
// with no valid key (a padded token) attends to itself only, so no softmax row is empty.
torch::Tensor refiner_attention_bias(const torch::Tensor& valid);

}  // namespace zest::hymotion
