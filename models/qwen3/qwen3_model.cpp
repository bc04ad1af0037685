// The Qwen3 decoder stack (see qwen3_model.h), written from transformers' modeling_qwen3 formulas: the same
// operations in the same precision (RMSNorm and the softmax in float32, RoPE tables in float32 cast to the
// activations' dtype), so that float32 hidden states agree with the reference to rounding.
#include "models/qwen3/qwen3_model.h"

#include "core/check.h"

#include <cmath>
#include <limits>

namespace zest::qwen3 {

ProjectionImpl::ProjectionImpl(int64_t in_features, int64_t out_features, bool with_bias,
                               const torch::TensorOptions& options) {
  weight = register_parameter("weight", torch::empty({out_features, in_features}, options), false);
  if (with_bias) bias = register_parameter("bias", torch::empty({out_features}, options), false);
}

torch::Tensor ProjectionImpl::forward(const torch::Tensor& x) const { return torch::linear(x, weight, bias); }

RMSNormImpl::RMSNormImpl(int64_t width, double eps, const torch::TensorOptions& options) : eps_(eps) {
  weight = register_parameter("weight", torch::empty({width}, options), false);
}

torch::Tensor RMSNormImpl::forward(const torch::Tensor& x) const {
  const torch::Tensor x32 = x.to(torch::kFloat32);
  const torch::Tensor normed = x32 * torch::rsqrt(x32.pow(2).mean(-1, /*keepdim=*/true) + eps_);
  return weight * normed.to(x.scalar_type());
}

Rotary rotary_embedding(int64_t positions, int64_t head_dim, double theta, const torch::Device& device) {
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat32).device(device);
  // 1 / theta^(2i/d), in float32 as transformers computes its inv_freq.
  const torch::Tensor exponent = torch::arange(0, head_dim, 2, torch::TensorOptions().dtype(torch::kInt64).device(device))
                                     .to(torch::kFloat32) / static_cast<float>(head_dim);
  const torch::Tensor inv_freq = 1.0 / torch::pow(torch::scalar_tensor(static_cast<float>(theta), f32), exponent);
  const torch::Tensor freqs = torch::outer(torch::arange(positions, f32), inv_freq);  // [T, d/2]
  const torch::Tensor angles = torch::cat({freqs, freqs}, -1);                         // [T, d]
  return {angles.cos(), angles.sin()};
}

namespace {

torch::Tensor rotate_half(const torch::Tensor& x) {
  const int64_t half = x.size(-1) / 2;
  return torch::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}

// x [B, H, T, d]: x·cos + rotate_half(x)·sin, the tables cast to x's dtype first (as transformers does).
torch::Tensor apply_rotary(const torch::Tensor& x, const Rotary& rotary) {
  const torch::Tensor cos = rotary.cos.to(x.scalar_type()), sin = rotary.sin.to(x.scalar_type());
  return x * cos + rotate_half(x) * sin;
}

// [B, 1, T, T] additive bias: 0 where query t may see key s (s <= t and s is a token), else the dtype's lowest
// value (transformers' eager mask; a row with no visible key then averages over all, never NaN).
torch::Tensor attention_bias(const torch::Tensor& attention_mask, int64_t batch, int64_t length,
                             const torch::TensorOptions& options) {
  const auto bool_options = torch::TensorOptions().dtype(torch::kBool).device(options.device());
  torch::Tensor allowed = torch::ones({length, length}, bool_options).tril().view({1, 1, length, length});
  if (attention_mask.defined()) {
    allowed = allowed & attention_mask.to(options.device()).to(torch::kBool).view({batch, 1, 1, length});
  } else {
    allowed = allowed.expand({batch, 1, length, length});
  }
  const double lowest = options.dtype() == torch::kBFloat16 ? -3.3895313892515355e38
                        : options.dtype() == torch::kHalf   ? -65504.0
                        : options.dtype() == torch::kFloat64 ? std::numeric_limits<double>::lowest()
                                                             : static_cast<double>(std::numeric_limits<float>::lowest());
  return torch::zeros(allowed.sizes(), options).masked_fill(allowed.logical_not(), lowest);
}

}  // namespace

Qwen3AttentionImpl::Qwen3AttentionImpl(const Qwen3Config& c, const torch::TensorOptions& options)
    : heads_(c.num_attention_heads), kv_heads_(c.num_key_value_heads), head_dim_(c.head_dim) {
  q_proj = register_module("q_proj", Projection(c.hidden_size, heads_ * head_dim_, c.attention_bias, options));
  k_proj = register_module("k_proj", Projection(c.hidden_size, kv_heads_ * head_dim_, c.attention_bias, options));
  v_proj = register_module("v_proj", Projection(c.hidden_size, kv_heads_ * head_dim_, c.attention_bias, options));
  o_proj = register_module("o_proj", Projection(heads_ * head_dim_, c.hidden_size, c.attention_bias, options));
  q_norm = register_module("q_norm", RMSNorm(head_dim_, c.rms_norm_eps, options));
  k_norm = register_module("k_norm", RMSNorm(head_dim_, c.rms_norm_eps, options));
}

torch::Tensor Qwen3AttentionImpl::forward(const torch::Tensor& x, const Rotary& rotary, const torch::Tensor& bias) const {
  const int64_t batch = x.size(0), length = x.size(1);
  // [B, T, H·d] → [B, T, H, d] → per-head norm → [B, H, T, d]
  const torch::Tensor q = q_norm->forward(q_proj->forward(x).view({batch, length, heads_, head_dim_})).transpose(1, 2);
  const torch::Tensor k = k_norm->forward(k_proj->forward(x).view({batch, length, kv_heads_, head_dim_})).transpose(1, 2);
  const torch::Tensor v = v_proj->forward(x).view({batch, length, kv_heads_, head_dim_}).transpose(1, 2);
  const int64_t group = heads_ / kv_heads_;  // key/value head j serves query heads j·group ... j·group + group-1
  const torch::Tensor keys = apply_rotary(k, rotary).repeat_interleave(group, 1);
  const torch::Tensor values = v.repeat_interleave(group, 1);
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim_));
  const torch::Tensor scores = torch::matmul(apply_rotary(q, rotary), keys.transpose(2, 3)) * scale + bias;
  const torch::Tensor weights = torch::softmax(scores, -1, torch::kFloat32).to(x.scalar_type());
  const torch::Tensor out = torch::matmul(weights, values).transpose(1, 2).reshape({batch, length, heads_ * head_dim_});
  return o_proj->forward(out);
}

Qwen3MLPImpl::Qwen3MLPImpl(const Qwen3Config& c, const torch::TensorOptions& options) {
  gate_proj = register_module("gate_proj", Projection(c.hidden_size, c.intermediate_size, false, options));
  up_proj = register_module("up_proj", Projection(c.hidden_size, c.intermediate_size, false, options));
  down_proj = register_module("down_proj", Projection(c.intermediate_size, c.hidden_size, false, options));
}

torch::Tensor Qwen3MLPImpl::forward(const torch::Tensor& x) const {
  return down_proj->forward(torch::silu(gate_proj->forward(x)) * up_proj->forward(x));
}

Qwen3DecoderLayerImpl::Qwen3DecoderLayerImpl(const Qwen3Config& c, const torch::TensorOptions& options) {
  self_attn = register_module("self_attn", Qwen3Attention(c, options));
  mlp = register_module("mlp", Qwen3MLP(c, options));
  input_layernorm = register_module("input_layernorm", RMSNorm(c.hidden_size, c.rms_norm_eps, options));
  post_attention_layernorm = register_module("post_attention_layernorm", RMSNorm(c.hidden_size, c.rms_norm_eps, options));
}

torch::Tensor Qwen3DecoderLayerImpl::forward(const torch::Tensor& x, const Rotary& rotary, const torch::Tensor& bias) const {
  const torch::Tensor h = x + self_attn->forward(input_layernorm->forward(x), rotary, bias);
  return h + mlp->forward(post_attention_layernorm->forward(h));
}

EmbeddingImpl::EmbeddingImpl(int64_t vocab, int64_t width, const torch::TensorOptions& options) {
  weight = register_parameter("weight", torch::empty({vocab, width}, options), false);
}

Qwen3ModelImpl::Qwen3ModelImpl(const Qwen3Config& config, const torch::TensorOptions& options) : config_(config) {
  embed_tokens = register_module("embed_tokens", Embedding(config.vocab_size, config.hidden_size, options));
  layers = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < config.num_hidden_layers; ++i) layers->push_back(Qwen3DecoderLayer(config, options));
  norm = register_module("norm", RMSNorm(config.hidden_size, config.rms_norm_eps, options));
}

Qwen3Output Qwen3ModelImpl::forward(const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
                                    bool all_hidden_states) const {
  ZEST_CHECK(input_ids.dim() == 2 && input_ids.scalar_type() == torch::kInt64, "Qwen3: input_ids must be [batch, tokens] int64");
  const int64_t batch = input_ids.size(0), length = input_ids.size(1);
  ZEST_CHECK(length >= 1 && length <= config_.max_position_embeddings, "Qwen3: ", length,
             " tokens; the model takes 1 to max_position_embeddings = ", config_.max_position_embeddings);
  if (input_ids.numel() > 0) {
    const auto range = torch::aminmax(input_ids);
    const int64_t low = std::get<0>(range).item<int64_t>(), high = std::get<1>(range).item<int64_t>();
    ZEST_CHECK(low >= 0 && high < config_.vocab_size, "Qwen3: token id ", low < 0 ? low : high,
               " is outside the vocabulary (", config_.vocab_size, " ids)");
  }
  if (attention_mask.defined()) {
    ZEST_CHECK(attention_mask.sizes() == input_ids.sizes(), "Qwen3: attention_mask must have input_ids' shape");
  }
  const torch::Tensor& table = embed_tokens->weight;
  torch::Tensor x = table.index_select(0, input_ids.to(table.device()).reshape({-1})).view({batch, length, -1});
  const Rotary rotary = rotary_embedding(length, config_.head_dim, config_.rope_theta, table.device());
  const torch::Tensor bias = attention_bias(attention_mask, batch, length, table.options());
  Qwen3Output out;
  for (const auto& module : *layers) {
    if (all_hidden_states) out.hidden_states.push_back(x);
    x = module->as<Qwen3DecoderLayerImpl>()->forward(x, rotary, bias);
  }
  out.last_hidden_state = norm->forward(x);
  if (all_hidden_states) out.hidden_states.push_back(out.last_hidden_state);
  return out;
}

}  // namespace zest::qwen3
