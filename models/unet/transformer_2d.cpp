// The UNet's attention pieces (diffusers Attention with the SDPA processor, GEGLU, BasicTransformerBlock,
// Transformer2DModel).
#include "models/unet/transformer_2d.h"

#include "core/compat.h"
#include "kernels/geglu_op.h"

namespace zest::unet {

namespace {
// Appends `module` to `list` (so it is named by its index, as in "to_out.0") and returns it typed.
template <typename Holder>
Holder register_indexed(torch::nn::ModuleListImpl& list, Holder module) {
  list.push_back(module);
  return module;
}
}  // namespace

AttentionImpl::AttentionImpl(int64_t dim, int64_t context_dim, int64_t heads,
                             const torch::TensorOptions& options)
    : heads_(heads) {
  to_q = register_module("to_q", Linear(dim, dim, false, options));
  to_k = register_module("to_k", Linear(context_dim, dim, false, options));
  to_v = register_module("to_v", Linear(context_dim, dim, false, options));
  auto to_out_list = register_module("to_out", torch::nn::ModuleList());
  to_out = register_indexed(*to_out_list, Linear(dim, dim, true, options));
}

torch::Tensor AttentionImpl::forward(const torch::Tensor& x, const torch::Tensor& context,
                                     const torch::Tensor& residual) const {
  const auto& source = context.defined() ? context : x;
  const int64_t batch = x.size(0);
  // [B, S, heads·d] → [B, heads, S, d]
  const auto split = [&](const torch::Tensor& t) {
    return t.view({batch, -1, heads_, t.size(-1) / heads_}).transpose(1, 2);
  };
  torch::Tensor q, k, v;
  if (context.defined()) {
    q = split(to_q->forward(x));
    k = split(to_k->forward(source));
    v = split(to_v->forward(source));
  } else {  // self-attention: q, k and v read x, and backward adds their input gradients in one buffer
    const auto qkv = LinearLayer::forward_shared_input(x, {to_q.get(), to_k.get(), to_v.get()});
    q = split(qkv[0]), k = split(qkv[1]), v = split(qkv[2]);
  }
  auto o = compat::scaled_dot_product_attention(q, k, v);
  o = o.transpose(1, 2).reshape({batch, -1, o.size(1) * o.size(3)}).to(q.scalar_type());
  return to_out->forward_plus(o, residual);
}

GegluImpl::GegluImpl(int64_t dim, int64_t inner_dim, const torch::TensorOptions& options) {
  proj = register_module("proj", Linear(dim, 2 * inner_dim, true, options));
}

torch::Tensor GegluImpl::forward(const torch::Tensor& x) const {
  return geglu(proj->forward(x));
}

FeedForwardImpl::FeedForwardImpl(int64_t dim, const torch::TensorOptions& options) {
  auto net = register_module("net", torch::nn::ModuleList());
  geglu = register_indexed(*net, Geglu(dim, 4 * dim, options));
  net->push_back(torch::nn::Dropout(torch::nn::DropoutOptions(0.0)));  // net.1: keeps net.2's index; p = 0 in every UNet block
  out = register_indexed(*net, Linear(4 * dim, dim, true, options));
}

// On CUDA the GEGLU output (the block's widest activation) is recomputed in backward rather than kept,
// where the output Linear decides so (models/common/linear_layer.h).
torch::Tensor FeedForwardImpl::forward(const torch::Tensor& x) const {
  return out->forward_of_activation(RecomputedActivation::geglu, geglu->project(x));
}

BasicTransformerBlockImpl::BasicTransformerBlockImpl(int64_t dim, int64_t heads, int64_t context_dim,
                                                     const torch::TensorOptions& options) {
  // LayerNorm eps is BasicTransformerBlock's own 1e-5, independent of the UNet's norm_eps.
  norm1 = register_module("norm1", LayerNorm(dim, 1e-5, options));
  attn1 = register_module("attn1", Attention(dim, dim, heads, options));
  norm2 = register_module("norm2", LayerNorm(dim, 1e-5, options));
  attn2 = register_module("attn2", Attention(dim, context_dim, heads, options));
  norm3 = register_module("norm3", LayerNorm(dim, 1e-5, options));
  ff = register_module("ff", FeedForward(dim, options));
}

torch::Tensor BasicTransformerBlockImpl::forward(const torch::Tensor& x,
                                                 const torch::Tensor& context) const {
  // The attention outputs join the residual stream in to_out's product (models/common/linear_layer.h).
  auto h = attn1->forward(norm1->forward(x), {}, x);
  h = attn2->forward(norm2->forward(h), context, h);
  return ff->forward(norm3->forward(h)) + h;
}

Transformer2DImpl::Transformer2DImpl(const Transformer2DOptions& o, const torch::TensorOptions& options)
    : o_(o) {
  const int64_t c = o.channels;
  // The input GroupNorm's eps is fixed at 1e-6 in diffusers (not norm_eps).
  norm = register_module("norm", GroupNorm(o.norm_groups, c, 1e-6, options));
  if (o.linear_projection) {
    proj_in_linear = register_module("proj_in", Linear(c, c, true, options));
  } else {
    proj_in_conv = register_module("proj_in", Conv2d(c, c, 1, 1, 0, options));
  }
  auto blocks = register_module("transformer_blocks", torch::nn::ModuleList());
  for (int64_t k = 0; k < o.layers; ++k) {
    blocks_.push_back(
        register_indexed(*blocks, BasicTransformerBlock(c, o.heads, o.context_dim, options)));
  }
  if (o.linear_projection) {
    proj_out_linear = register_module("proj_out", Linear(c, c, true, options));
  } else {
    proj_out_conv = register_module("proj_out", Conv2d(c, c, 1, 1, 0, options));
  }
}

torch::Tensor Transformer2DImpl::forward(const torch::Tensor& x, const torch::Tensor& context) const {
  const int64_t batch = x.size(0), height = x.size(2), width = x.size(3);
  const int64_t c = o_.channels;
  const auto to_tokens = [&](const torch::Tensor& t) {  // [B, C, H, W] → [B, H·W, C]
    return t.permute({0, 2, 3, 1}).reshape({batch, height * width, c});
  };
  // Inverse of to_tokens, in x's layout: for channels-last activations both are views, no copy.
  const auto to_image = [&](const torch::Tensor& t) {
    return t.reshape({batch, height, width, c}).permute({0, 3, 1, 2}).contiguous(x.suggest_memory_format());
  };
  auto h = norm->forward(x);
  h = o_.linear_projection ? proj_in_linear->forward(to_tokens(h)) : to_tokens(proj_in_conv->forward(h));
  for (const auto& block : blocks_) h = block->forward(h, context);
  // proj_out's output joins x in its product where it can (models/common/linear_layer.h, conv_layer.h).
  return o_.linear_projection ? to_image(proj_out_linear->forward_plus(h, to_tokens(x)))
                              : proj_out_conv->forward_plus(to_image(h), x);
}

}  // namespace zest::unet
