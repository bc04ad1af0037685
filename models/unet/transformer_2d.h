// The UNet's attention pieces: Attention (to_q/k/v/out), GEGLU FeedForward, BasicTransformerBlock and
// Transformer2DModel (GroupNorm → proj_in → blocks → proj_out, residual), with diffusers' names.
#pragma once

#include "models/unet/layers.h"

#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace zest::unet {

// Multi-head attention, q/k/v without bias, heads contiguous in the projection width; attends to
// `context` (cross-attention) or to `x` itself when `context` is undefined. Returns residual + the attention's
// output, the sum made in to_out's product (a transformer block's residual stream).
class AttentionImpl : public torch::nn::Module {
 public:
  AttentionImpl(int64_t dim, int64_t context_dim, int64_t heads, const torch::TensorOptions& options);
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& context, const torch::Tensor& residual) const;

 private:
  int64_t heads_;
  Linear to_q{nullptr};
  Linear to_k{nullptr};
  Linear to_v{nullptr};
  Linear to_out{nullptr};  // to_out.0 (to_out.1 is a parameter-free dropout)
};
TORCH_MODULE(Attention);

// GEGLU: proj → [value | gate] → value · GELU_erf(gate).
class GegluImpl : public torch::nn::Module {
 public:
  GegluImpl(int64_t dim, int64_t inner_dim, const torch::TensorOptions& options);
  torch::Tensor forward(const torch::Tensor& x) const;
  // The projection alone (FeedForward applies GEGLU itself when it recomputes it in backward).
  torch::Tensor project(const torch::Tensor& x) const { return proj->forward(x); }

 private:
  Linear proj{nullptr};
};
TORCH_MODULE(Geglu);

// FeedForward: net.0 = GEGLU(dim → 4·dim), net.1 = dropout (p = 0), net.2 = Linear(4·dim → dim).
class FeedForwardImpl : public torch::nn::Module {
 public:
  FeedForwardImpl(int64_t dim, const torch::TensorOptions& options);
  torch::Tensor forward(const torch::Tensor& x) const;

 private:
  Geglu geglu{nullptr};
  Linear out{nullptr};
};
TORCH_MODULE(FeedForward);

// Pre-LayerNorm block (eps 1e-5): self-attention, cross-attention to the text, GEGLU MLP.
class BasicTransformerBlockImpl : public torch::nn::Module {
 public:
  BasicTransformerBlockImpl(int64_t dim, int64_t heads, int64_t context_dim,
                            const torch::TensorOptions& options);
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& context) const;

 private:
  LayerNorm norm1{nullptr};
  Attention attn1{nullptr};
  LayerNorm norm2{nullptr};
  Attention attn2{nullptr};
  LayerNorm norm3{nullptr};
  FeedForward ff{nullptr};
};
TORCH_MODULE(BasicTransformerBlock);

struct Transformer2DOptions {
  int64_t channels = 0;  // in = inner width = heads · head_dim
  int64_t heads = 1;
  int64_t layers = 1;  // BasicTransformerBlocks
  int64_t context_dim = 0;
  int64_t norm_groups = 32;
  bool linear_projection = false;  // Linear proj_in/out (SDXL) instead of 1×1 convs (SD1.5)
};

// Continuous-input Transformer2DModel: [B, C, H, W] → same shape (token = h·W + w).
class Transformer2DImpl : public torch::nn::Module {
 public:
  Transformer2DImpl(const Transformer2DOptions& o, const torch::TensorOptions& options);
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& context) const;

 private:
  Transformer2DOptions o_;
  GroupNorm norm{nullptr};
  Conv2d proj_in_conv{nullptr};  // exactly one of the conv/linear pair exists, named proj_in
  Linear proj_in_linear{nullptr};
  std::vector<BasicTransformerBlock> blocks_;
  Conv2d proj_out_conv{nullptr};
  Linear proj_out_linear{nullptr};
};
TORCH_MODULE(Transformer2D);

}  // namespace zest::unet
