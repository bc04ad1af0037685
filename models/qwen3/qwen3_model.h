// transformers' Qwen3Model (the decoder stack of Qwen3ForCausalLM, without the language-model head) under the
// reference state-dict names ("model." + ...): token embeddings, pre-norm decoder layers of grouped-query
// attention (per-head RMSNorm of queries and keys, rotary embeddings) and a SwiGLU MLP, and the final RMSNorm.
// Forward only: HY-Motion reads the last hidden state as its text features.
#pragma once

#include "models/qwen3/qwen3_config.h"

#include <torch/torch.h>

#include <vector>

namespace zest::qwen3 {

// A module holding weight [out, in] and, with bias, bias [out], allocated uninitialised (weights are loaded).
class ProjectionImpl : public torch::nn::Module {
 public:
  ProjectionImpl(int64_t in_features, int64_t out_features, bool with_bias, const torch::TensorOptions& options);
  torch::Tensor forward(const torch::Tensor& x) const;
  torch::Tensor weight, bias;
};
TORCH_MODULE(Projection);

// Qwen3RMSNorm: x / sqrt(mean(x²) + eps) computed in float32, cast back, times weight.
class RMSNormImpl : public torch::nn::Module {
 public:
  RMSNormImpl(int64_t width, double eps, const torch::TensorOptions& options);
  torch::Tensor forward(const torch::Tensor& x) const;
  torch::Tensor weight;

 private:
  double eps_;
};
TORCH_MODULE(RMSNorm);

// Rotary embeddings of positions 0..T-1: cos and sin [T, head_dim] in float32 (transformers' default RoPE).
struct Rotary {
  torch::Tensor cos, sin;
};
Rotary rotary_embedding(int64_t positions, int64_t head_dim, double theta, const torch::Device& device);

class Qwen3AttentionImpl : public torch::nn::Module {
 public:
  Qwen3AttentionImpl(const Qwen3Config& config, const torch::TensorOptions& options);
  // x [B, T, hidden]; bias [B, 1, T, T] additive (0 or the dtype's lowest: causal and padding).
  torch::Tensor forward(const torch::Tensor& x, const Rotary& rotary, const torch::Tensor& bias) const;

  Projection q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};
  RMSNorm q_norm{nullptr}, k_norm{nullptr};

 private:
  int64_t heads_, kv_heads_, head_dim_;
};
TORCH_MODULE(Qwen3Attention);

class Qwen3MLPImpl : public torch::nn::Module {
 public:
  Qwen3MLPImpl(const Qwen3Config& config, const torch::TensorOptions& options);
  torch::Tensor forward(const torch::Tensor& x) const;  // down(silu(gate(x)) · up(x))

  Projection gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};
};
TORCH_MODULE(Qwen3MLP);

class Qwen3DecoderLayerImpl : public torch::nn::Module {
 public:
  Qwen3DecoderLayerImpl(const Qwen3Config& config, const torch::TensorOptions& options);
  torch::Tensor forward(const torch::Tensor& x, const Rotary& rotary, const torch::Tensor& bias) const;

  Qwen3Attention self_attn{nullptr};
  Qwen3MLP mlp{nullptr};
  RMSNorm input_layernorm{nullptr}, post_attention_layernorm{nullptr};
};
TORCH_MODULE(Qwen3DecoderLayer);

class EmbeddingImpl : public torch::nn::Module {
 public:
  EmbeddingImpl(int64_t vocab, int64_t width, const torch::TensorOptions& options);
  torch::Tensor weight;  // [vocab, width]
};
TORCH_MODULE(Embedding);

struct Qwen3Output {
  torch::Tensor last_hidden_state;  // [B, T, hidden]: after the final norm (transformers' hidden_states[-1])
  // With all_hidden_states: transformers' output_hidden_states, num_hidden_layers + 1 entries (the
  // embeddings, each layer's output but the last, then last_hidden_state).
  std::vector<torch::Tensor> hidden_states;
};

// The decoder stack. Its own parameter names lack the "model." that Qwen3ForCausalLM's files put before them
// (models/qwen3/qwen3_load.h adds it).
class Qwen3ModelImpl : public torch::nn::Module {
 public:
  Qwen3ModelImpl(const Qwen3Config& config, const torch::TensorOptions& options = {});
  // input_ids [B, T] int64 (ids below vocab_size, checked); attention_mask [B, T] (1 = token, 0 = padding;
  // undefined: all tokens). Positions are 0..T-1 as transformers numbers them without a cache.
  Qwen3Output forward(const torch::Tensor& input_ids, const torch::Tensor& attention_mask = {},
                      bool all_hidden_states = false) const;

  const Qwen3Config& config() const { return config_; }

  Embedding embed_tokens{nullptr};
  torch::nn::ModuleList layers{nullptr};
  RMSNorm norm{nullptr};

 private:
  Qwen3Config config_;
};
TORCH_MODULE(Qwen3Model);

}  // namespace zest::qwen3
