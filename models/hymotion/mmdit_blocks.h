// The MMDiT's transformer blocks and output head: double-stream blocks (separate motion/text weights,
// joint attention), single-stream blocks (fused attention + MLP) and the final layer (docs/models.md 1.8).
#pragma once

#include "models/hymotion/layers.h"
#include "models/hymotion/packed_tokens.h"

#include <torch/torch.h>

#include <memory>
#include <utility>

namespace zest::hymotion {

// Attention context shared by every block of one forward: the additive mask and the RoPE tables
// (which cover the first cos.size(0) tokens of the [motion ; text] sequence), and where the blocks run over
// packed valid tokens (packed_tokens.h), the packing.
struct AttnContext {
  torch::Tensor bias;  // [B, 1, N, N]
  torch::Tensor cos;   // [R, head_dim]
  torch::Tensor sin;   // [R, head_dim]
  std::shared_ptr<const PackedTokens> packed;  // null: [B, S, D] activations with padding
};

// One stream's weights in a double block, registered as "<prefix>_mod", "<prefix>_qkv", ...
struct StreamWeights {
  Modulation mod{nullptr};
  Linear qkv{nullptr};
  HeadNorm q_norm{nullptr}, k_norm{nullptr};
  Linear out_proj{nullptr};
  Mlp mlp{nullptr};
};

class DoubleBlockImpl : public torch::nn::Module {
 public:
  DoubleBlockImpl(const HyMotionConfig& cfg, const Init& init);
  // motion [B, L, D], text [B, T, D] (packed: [Nm, D] and [Nt, D]), c [B, 1, D] → updated (motion, text).
  std::pair<torch::Tensor, torch::Tensor> forward(const torch::Tensor& motion, const torch::Tensor& text,
                                                  const torch::Tensor& c, const AttnContext& ctx) const;

 private:
  StreamWeights make_stream(const std::string& prefix, const HyMotionConfig& cfg, const Init& init);
  int64_t num_heads_;
  StreamWeights motion_, text_;
};
TORCH_MODULE(DoubleBlock);

class SingleBlockImpl : public torch::nn::Module {
 public:
  SingleBlockImpl(const HyMotionConfig& cfg, const Init& init);
  // z [B, N, D] (motion then text; packed: [Nm + Nt, D], each sample's frames then its tokens), c [B, 1, D]
  // → z's shape.
  torch::Tensor forward(const torch::Tensor& z, const torch::Tensor& c, const AttnContext& ctx) const;

 private:
  int64_t dim_, mlp_hidden_, num_heads_;
  Act act_;
  Modulation modulation_{nullptr};
  Linear linear1_{nullptr}, linear2_{nullptr};
  HeadNorm q_norm_{nullptr}, k_norm_{nullptr};
};
TORCH_MODULE(SingleBlock);

// FinalLayer: linear(modulate(LN(x), shift, scale)), (shift, scale) from adaLN_modulation(c).
class FinalLayerImpl : public torch::nn::Module {
 public:
  FinalLayerImpl(const HyMotionConfig& cfg, const Init& init);
  // x [B, L, D], or packed motion rows [Nm, D] of `samples`.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& c, const SampleRows* samples = nullptr) const;

 private:
  Modulation modulation_{nullptr};
  Linear linear_{nullptr};
};
TORCH_MODULE(FinalLayer);

}  // namespace zest::hymotion
