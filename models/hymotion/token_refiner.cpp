// SingleTokenRefiner forward, following token_refiner.py of the reference.
#include "models/hymotion/token_refiner.h"

#include "core/check.h"
#include "kernels/gated_residual_op.h"

#include <limits>

namespace zest::hymotion {

RefinerBlockImpl::RefinerBlockImpl(int64_t dim, int64_t num_heads, const RefinerConfig& cfg, int64_t mlp_hidden,
                                   const Init& init)
    : num_heads_(num_heads) {
  const int64_t head_dim = dim / num_heads;
  // Registration order = the reference's state-dict order (and its init draw order).
  norm1_ = register_module("norm1", AffineLayerNorm(dim, init));
  qkv_ = register_module("self_attn_qkv", Linear(dim, 3 * dim, cfg.qkv_bias, init));
  q_norm_ = register_module("self_attn_q_norm", HeadNorm(cfg.qk_norm, head_dim, init));
  k_norm_ = register_module("self_attn_k_norm", HeadNorm(cfg.qk_norm, head_dim, init));
  proj_ = register_module("self_attn_proj", Linear(dim, dim, cfg.qkv_bias, init));
  norm2_ = register_module("norm2", AffineLayerNorm(dim, init));
  mlp_ = register_module("mlp", Mlp(dim, mlp_hidden, cfg.mlp_act, init));
  modulation_ = register_module("adaLN_modulation", Modulation(dim, 2, Act::silu, /*zero_init=*/true, init));
}

torch::Tensor RefinerBlockImpl::forward(const torch::Tensor& h, const torch::Tensor& c,
                                        const torch::Tensor& bias) const {
  const auto gates = modulation_->forward(c);  // gate_msa, gate_mlp
  const auto qkv = split_qkv(qkv_->forward(norm1_->forward(h)), num_heads_);
  const auto& v = qkv[2];
  const auto q = q_norm_->forward(qkv[0]).to(v.scalar_type());
  const auto k = k_norm_->forward(qkv[1]).to(v.scalar_type());
  const auto out = gated_residual(h, proj_->forward(attention(q, k, v, bias)), gates[0]);
  return gated_residual(out, mlp_->forward(norm2_->forward(out)), gates[1]);
}

TokenRefinerImpl::TokenRefinerImpl(const HyMotionConfig& cfg, const Init& init) {
  const int64_t dim = cfg.feat_dim;
  const RefinerConfig& r = cfg.refiner;
  input_embedder_ = register_module("input_embedder", Linear(dim, dim, true, init));
  context_encoder_ = register_module("context_encoder", MlpEncoder(dim, dim, r.mlp_act, init));
  // The refiner sees the raw flow time (time_factor 1), unlike the main timestep encoder.
  timestep_encoder_ = register_module("timestep_encoder", TimestepEncoder(dim, r.mlp_act, 1.0, init));
  auto holder = register_module("individual_token_refiner", std::make_shared<torch::nn::Module>());
  auto list = holder->register_module("blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < r.num_layers; ++i) {
    blocks_.push_back(RefinerBlock(dim, cfg.num_heads, r, cfg.refiner_mlp_hidden(), init));
    list->push_back(blocks_.back());
  }
}

torch::Tensor TokenRefinerImpl::forward(const torch::Tensor& ctxt, const torch::Tensor& t,
                                        const torch::Tensor& valid) const {
  ZEST_CHECK(valid.dim() == 2 && valid.size(0) == ctxt.size(0) && valid.size(1) == ctxt.size(1),
             "text_refiner: ctxt_mask_temporal ", valid.sizes(), " does not match text tokens ", ctxt.sizes());
  const auto time_repr = timestep_encoder_->forward(t);  // [B, 1, D]
  // Masked mean over valid tokens; the clamp keeps an all-padding sample finite.
  const auto weights = valid.to(torch::kFloat32).unsqueeze(-1);
  const auto pooled = (ctxt * weights).sum(1) / weights.sum(1).clamp_min(1e-6);
  const auto c = time_repr + context_encoder_->forward(pooled).unsqueeze(1);
  const auto bias = refiner_attention_bias(valid);
  auto h = input_embedder_->forward(ctxt);
  for (const auto& block : blocks_) h = block->forward(h, c, bias);
  return h;
}

torch::Tensor refiner_attention_bias(const torch::Tensor& valid) {
  const int64_t batch = valid.size(0), len = valid.size(1);
  const auto keys = valid.to(torch::kBool).view({batch, 1, 1, len}).expand({batch, 1, len, len});
  auto allowed = keys.logical_and(keys.transpose(2, 3));
  const auto empty_row = allowed.any(-1, /*keepdim=*/true).logical_not();  // [B, 1, T, 1]
  const auto diag = torch::eye(len, valid.options().dtype(torch::kBool)).view({1, 1, len, len});
  allowed = torch::where(empty_row, diag, allowed);
  const auto f32 = valid.options().dtype(torch::kFloat32);
  return torch::zeros({batch, 1, len, len}, f32)
      .masked_fill(allowed.logical_not(), -std::numeric_limits<float>::infinity());
}

}  // namespace zest::hymotion
