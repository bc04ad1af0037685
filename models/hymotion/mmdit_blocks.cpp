// Double-stream, single-stream and final layers of HunyuanMotionMMDiT, following hymotion_mmdit.py
// and encoders.py of the reference.
#include "models/hymotion/mmdit_blocks.h"

#include "kernels/gated_residual_op.h"
#include "kernels/qk_norm_rope_op.h"
#include "models/common/packed_rows.h"

namespace zest::hymotion {
namespace {

struct Qkv {
  torch::Tensor q, k, v;  // [B, S, H, d]
};

// Norms q and k per head and casts them to v's dtype, as the reference does.
Qkv normed_qkv(const torch::Tensor& projection, int64_t num_heads, const HeadNorm& q_norm,
               const HeadNorm& k_norm) {
  auto parts = split_qkv(projection, num_heads);
  const auto dtype = parts[2].scalar_type();
  return {q_norm->forward(parts[0]).to(dtype), k_norm->forward(parts[1]).to(dtype), parts[2]};
}

torch::Tensor rope_and_attend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                              const AttnContext& ctx) {
  return attention(apply_rope(q, ctx.cos, ctx.sin), apply_rope(k, ctx.cos, ctx.sin), v, ctx.bias);
}

QkvProjection projection_of(const torch::Tensor& proj, const HeadNorm& q_norm, const HeadNorm& k_norm) {
  return {proj, q_norm->rms_weight(), k_norm->rms_weight()};
}

// Attention over the streams' projections joined along the sequence, on CUDA in one kernel each way for
// the split, the q/k norms, the joining and RoPE (kernels/qk_norm_rope_op.h).
torch::Tensor attend_with_kernels(const std::vector<QkvProjection>& streams, int64_t num_heads,
                                  const AttnContext& ctx) {
  const auto in = qk_norm_rope(streams, num_heads, ctx.cos, ctx.sin, kNormEpsilon);
  return attention(in.q, in.k, in.v, ctx.bias);
}

// Packed rows [N, W] at `rows` of a padded [batch, len, W] layout, zeros elsewhere: what the attention reads.
torch::Tensor padded(const torch::Tensor& packed_rows, const torch::Tensor& rows, int64_t batch, int64_t len) {
  return scatter_rows(packed_rows, rows, batch * len).view({batch, len, packed_rows.size(1)});
}

// The attention output's rows [N, D] at `rows` of its [B, S, D] layout.
torch::Tensor packed(const torch::Tensor& attention_out, const torch::Tensor& rows) {
  return gather_rows(attention_out.reshape({-1, attention_out.size(2)}), rows);
}

}  // namespace

// ---------------------------------------------------------------------------------------------------
// Double-stream block

DoubleBlockImpl::DoubleBlockImpl(const HyMotionConfig& cfg, const Init& init) : num_heads_(cfg.num_heads) {
  motion_ = make_stream("motion", cfg, init);
  text_ = make_stream("text", cfg, init);
}

StreamWeights DoubleBlockImpl::make_stream(const std::string& prefix, const HyMotionConfig& cfg,
                                           const Init& init) {
  const int64_t dim = cfg.feat_dim;
  StreamWeights s;
  s.mod = register_module(prefix + "_mod", Modulation(dim, 6, Act::silu, /*zero_init=*/true, init));
  s.qkv = register_module(prefix + "_qkv", Linear(dim, 3 * dim, cfg.qkv_bias, init));
  s.q_norm = register_module(prefix + "_q_norm", HeadNorm(cfg.qk_norm, cfg.head_dim(), init));
  s.k_norm = register_module(prefix + "_k_norm", HeadNorm(cfg.qk_norm, cfg.head_dim(), init));
  s.out_proj = register_module(prefix + "_out_proj", Linear(dim, dim, cfg.qkv_bias, init));
  s.mlp = register_module(prefix + "_mlp", Mlp(dim, cfg.mlp_hidden(), cfg.mlp_act, init));
  return s;
}

std::pair<torch::Tensor, torch::Tensor> DoubleBlockImpl::forward(const torch::Tensor& motion,
                                                                 const torch::Tensor& text,
                                                                 const torch::Tensor& c,
                                                                 const AttnContext& ctx) const {
  // m[0..5] = shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp
  const PackedTokens* p = ctx.packed.get();
  const SampleRows* motion_rows = p ? &p->motion : nullptr;
  const SampleRows* text_rows = p ? &p->text : nullptr;
  const auto mm = motion_.mod->forward(c);
  const auto tm = text_.mod->forward(c);
  auto mp = motion_.qkv->forward(norm_modulate(motion, mm[0], mm[1], motion_rows));
  auto tp = text_.qkv->forward(norm_modulate(text, tm[0], tm[1], text_rows));
  if (p) {
    mp = padded(mp, p->motion_rows, p->batch, p->motion_len);
    tp = padded(tp, p->text_rows, p->batch, p->text_len);
  }
  // Joint attention over [motion ; text].
  const std::vector<QkvProjection> streams{projection_of(mp, motion_.q_norm, motion_.k_norm),
                                           projection_of(tp, text_.q_norm, text_.k_norm)};
  torch::Tensor o;
  if (uses_qk_norm_rope_kernels(streams, num_heads_, ctx.cos, ctx.sin)) {
    o = attend_with_kernels(streams, num_heads_, ctx);
  } else {
    const auto mq = normed_qkv(mp, num_heads_, motion_.q_norm, motion_.k_norm);
    const auto tq = normed_qkv(tp, num_heads_, text_.q_norm, text_.k_norm);
    o = rope_and_attend(torch::cat({mq.q, tq.q}, 1), torch::cat({mq.k, tq.k}, 1), torch::cat({mq.v, tq.v}, 1), ctx);
  }
  // One split, not two narrows (or two gathers): its backward joins the two gradients with one cat, where each
  // narrow's would write zeros the size of the whole attention output and the two would then be added.
  const auto streams_out = p ? packed(o, p->streams_in_joint).split_with_sizes({motion.size(0), text.size(0)}, 0)
                             : o.split_with_sizes({motion.size(1), text.size(1)}, 1);
  const auto& mo = streams_out[0];
  const auto& to = streams_out[1];

  auto m = gated_residual(motion, motion_.out_proj->forward(mo), mm[2], motion_rows);
  m = gated_residual(m, motion_.mlp->forward(norm_modulate(m, mm[3], mm[4], motion_rows)), mm[5], motion_rows);
  auto t = gated_residual(text, text_.out_proj->forward(to), tm[2], text_rows);
  t = gated_residual(t, text_.mlp->forward(norm_modulate(t, tm[3], tm[4], text_rows)), tm[5], text_rows);
  return {m, t};
}

// ---------------------------------------------------------------------------------------------------
// Single-stream block

SingleBlockImpl::SingleBlockImpl(const HyMotionConfig& cfg, const Init& init)
    : dim_(cfg.feat_dim), mlp_hidden_(cfg.mlp_hidden()), num_heads_(cfg.num_heads), act_(cfg.mlp_act) {
  modulation_ = register_module("modulation", Modulation(dim_, 3, Act::silu, /*zero_init=*/true, init));
  // linear1: [q | k | v | mlp hidden]; linear2: [attention out | act(mlp hidden)] → D.
  linear1_ = register_module("linear1", Linear(dim_, 3 * dim_ + mlp_hidden_, cfg.qkv_bias, init));
  linear2_ = register_module("linear2", Linear(dim_ + mlp_hidden_, dim_, cfg.qkv_bias, init));
  q_norm_ = register_module("q_norm", HeadNorm(cfg.qk_norm, cfg.head_dim(), init));
  k_norm_ = register_module("k_norm", HeadNorm(cfg.qk_norm, cfg.head_dim(), init));
}

torch::Tensor SingleBlockImpl::forward(const torch::Tensor& z, const torch::Tensor& c,
                                       const AttnContext& ctx) const {
  const auto m = modulation_->forward(c);  // shift, scale, gate
  // [q | k | v] and the MLP half as two products (linear_layer.h's split form): no cat of their gradients in
  // backward; with GELU_tanh, the MLP half's product also writes its activation (parts[2], when an epilogue
  // made it).
  const bool joined = act_ == Act::gelu_tanh;
  const PackedTokens* p = ctx.packed.get();
  const SampleRows* rows = p ? &p->joint : nullptr;
  const auto normed = norm_modulate(z, m[0], m[1], rows).to(linear1_->weight.scalar_type());
  const auto parts = linear1_->forward_split(normed, {3 * dim_, mlp_hidden_}, /*gelu_of_last=*/joined);
  const auto qkv = p ? padded(parts[0], p->joint_rows, p->batch, p->joint_len()) : parts[0];
  const std::vector<QkvProjection> stream{projection_of(qkv, q_norm_, k_norm_)};
  torch::Tensor o;
  if (uses_qk_norm_rope_kernels(stream, num_heads_, ctx.cos, ctx.sin)) {
    o = attend_with_kernels(stream, num_heads_, ctx);
  } else {
    const auto heads = normed_qkv(qkv, num_heads_, q_norm_, k_norm_);
    o = rope_and_attend(heads.q, heads.k, heads.v, ctx);
  }
  if (p) o = packed(o, p->joint_rows);
  // linear2 over [attention | GELU(MLP half)] as two products, the cat never written (the joined form).
  const auto out = joined ? linear2_->forward_joined_gelu(o, parts[1], parts[2])
                           : linear2_->forward(concat_activated(o, parts[1], act_));
  return gated_residual(z, out, m[2], rows);
}

// ---------------------------------------------------------------------------------------------------
// Final layer

FinalLayerImpl::FinalLayerImpl(const HyMotionConfig& cfg, const Init& init) {
  modulation_ = register_module("adaLN_modulation",
                                Modulation(cfg.feat_dim, 2, cfg.final_layer.act, /*zero_init=*/true, init));
  linear_ = register_module("linear", Linear(cfg.feat_dim, cfg.output_dim, true, init));
  if (cfg.final_layer.zero_init) linear_->zero_();
}

torch::Tensor FinalLayerImpl::forward(const torch::Tensor& x, const torch::Tensor& c, const SampleRows* samples) const {
  const auto m = modulation_->forward(c);  // shift first, then scale
  return linear_->forward(norm_modulate(x, m[0], m[1], samples));
}

}  // namespace zest::hymotion
