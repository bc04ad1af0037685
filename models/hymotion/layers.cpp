// HY-Motion building blocks: numerics follow the reference's operation order so float32 results match
// it to rounding (see docs/models.md 1.4 on the precision of the sinusoidal embedding). In bf16/fp16
// they run as the reference does under autocast (docs/models.md 5): Linear casts its input to the
// weights' dtype, norms and the sinusoid compute in float32.
#include "models/hymotion/layers.h"

#include "core/check.h"
#include "kernels/block_sparse_attention_op.h"
#include "kernels/concat_gelu_op.h"
#include "models/common/contiguous_grad.h"
#include "models/common/fused_norms.h"
#include "kernels/rms_norm_op.h"
#include "kernels/rope_op.h"
#include "core/compat.h"

#include <cmath>
#include <optional>

namespace zest::hymotion {

constexpr double kNormEps = kNormEpsilon;
constexpr int64_t kRopeMaxPositions = 5000;  // the reference precomputes positions 0..4999

torch::Tensor activate(const torch::Tensor& x, Act act) {
  switch (act) {
    case Act::gelu: return torch::gelu(x);
    case Act::gelu_tanh: return torch::gelu(x, "tanh");
    case Act::relu: return torch::relu(x);
    case Act::silu: return torch::silu(x);
  }
  ZEST_FAIL("unknown activation");
}

torch::Tensor concat_activated(const torch::Tensor& left, const torch::Tensor& right, Act act) {
  if (act == Act::gelu_tanh) return concat_gelu_tanh(left, right);
  return torch::cat({left, activate(right, act)}, -1);
}

// LayerNorm is on autocast's float32 list: it computes in float32 and returns float32, so the modulation
// that follows it also runs in float32; the next Linear casts down.
torch::Tensor layer_norm_plain(const torch::Tensor& x) {
  return torch::layer_norm(x.to(torch::kFloat32), {x.size(-1)}, {}, {}, kNormEps);
}

namespace {
torch::Tensor affine_layer_norm(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  return torch::layer_norm(x.to(torch::kFloat32), {x.size(-1)}, weight.to(torch::kFloat32),
                           bias.to(torch::kFloat32), kNormEps);
}
}  // namespace

torch::Tensor modulate(const torch::Tensor& x, const torch::Tensor& shift, const torch::Tensor& scale) {
  return x * (1 + scale) + shift;
}

torch::Tensor norm_modulate(const torch::Tensor& x, const torch::Tensor& shift, const torch::Tensor& scale,
                            const SampleRows* samples) {
  return layer_norm_modulate(x, shift, scale, kNormEps, samples);
}

// ---------------------------------------------------------------------------------------------------
// Parameterised layers

LinearImpl::LinearImpl(int64_t in, int64_t out, bool has_bias, const Init& init) {
  register_weights(torch::empty({out, in}, init.options), has_bias ? torch::empty({out}, init.options) : torch::Tensor());
  if (init.is_meta()) return;
  torch::NoGradGuard no_grad;
  // PyTorch's reset_parameters: kaiming_uniform_(a=√5) is U(±1/√in); the bias uses the same bound.
  torch::nn::init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (has_bias) {
    const double bound = in > 0 ? 1.0 / std::sqrt(static_cast<double>(in)) : 0.0;
    torch::nn::init::uniform_(bias, -bound, bound);
  }
}

void LinearImpl::zero_() {
  if (weight.device().is_meta()) return;
  torch::NoGradGuard no_grad;
  weight.zero_();
  if (bias.defined()) bias.zero_();
}

AffineLayerNormImpl::AffineLayerNormImpl(int64_t dim, const Init& init) {
  weight = register_parameter("weight", torch::ones({dim}, init.options));
  bias = register_parameter("bias", torch::zeros({dim}, init.options));
}

torch::Tensor AffineLayerNormImpl::forward(const torch::Tensor& x) const {
  return affine_layer_norm(x, weight, bias);
}

HeadNormImpl::HeadNormImpl(QkNorm kind, int64_t head_dim, const Init& init) : kind_(kind) {
  if (kind == QkNorm::none) return;
  weight_ = register_parameter("weight", torch::ones({head_dim}, init.options));
  if (kind == QkNorm::layer) bias_ = register_parameter("bias", torch::zeros({head_dim}, init.options));
}

torch::Tensor HeadNormImpl::forward(const torch::Tensor& x) const {
  switch (kind_) {
    case QkNorm::none: return x;
    case QkNorm::layer: return affine_layer_norm(x, weight_, bias_);  // float32; callers cast to v's dtype
    case QkNorm::rms: {
      if (uses_rms_norm_kernels(x, weight_)) return rms_norm_with_kernels(x, weight_, kNormEps);  // CUDA
      const auto xf = x.to(torch::kFloat32);
      const auto normed = xf * torch::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + kNormEps);
      return normed.to(x.scalar_type()) * weight_;
    }
  }
  ZEST_FAIL("unknown qk norm");
}

ModulationImpl::ModulationImpl(int64_t dim, int64_t factor, Act act, bool zero_init, const Init& init)
    : act_(act), factor_(factor) {
  linear_ = register_module("linear", Linear(dim, factor * dim, true, init));
  if (zero_init) linear_->zero_();
}

std::vector<torch::Tensor> ModulationImpl::forward(const torch::Tensor& c) const {
  return linear_->forward(activate(c, act_)).chunk(factor_, -1);
}

MlpImpl::MlpImpl(int64_t dim, int64_t hidden, Act act, const Init& init) : act_(act) {
  fc1_ = register_module("fc1", Linear(dim, hidden, true, init));
  fc2_ = register_module("fc2", Linear(hidden, dim, true, init));
}

namespace {
std::optional<RecomputedActivation> recomputable(Act act) {
  switch (act) {
    case Act::gelu: return RecomputedActivation::gelu;
    case Act::gelu_tanh: return RecomputedActivation::gelu_tanh;
    case Act::silu: return RecomputedActivation::silu;
    case Act::relu: return std::nullopt;
  }
  return std::nullopt;
}
}  // namespace

// On CUDA the activation is recomputed in backward rather than kept, where fc2 decides so
// (models/common/linear_layer.h): the hidden layer is the block's widest activation.
torch::Tensor MlpImpl::forward(const torch::Tensor& x) const {
  const auto f = recomputable(act_);
  if (act_ == Act::gelu_tanh) {
    // fc1's product also writes GELU through its epilogue (the split form, one part) and fc2's backward
    // takes fc1's output gradient through GELU's derivative in its own epilogue.
    const auto x16 = x.to(fc1_->weight.scalar_type());
    if (fc2_->recomputes(*f, x16)) {
      const auto parts = fc1_->forward_split(x16, {fc1_->out_features()}, /*gelu_of_last=*/true);
      return fc2_->forward_of_activation(*f, parts[0], {}, parts[1]);
    }
  }
  const auto hidden = fc1_->forward(x);
  if (f) return fc2_->forward_of_activation(*f, hidden);
  return fc2_->forward(activate(hidden, act_));
}

TwoLayerImpl::TwoLayerImpl(int64_t in, int64_t dim, Act act, const Init& init) : act_(act) {
  first_ = register_module("0", Linear(in, dim, true, init));
  second_ = register_module("2", Linear(dim, dim, true, init));
}

torch::Tensor TwoLayerImpl::forward(const torch::Tensor& x) const {
  return second_->forward(activate(first_->forward(x), act_));
}

MlpEncoderImpl::MlpEncoderImpl(int64_t in, int64_t dim, Act act, const Init& init) {
  linears_ = register_module("linears", TwoLayer(in, dim, act, init));
}

TimestepEncoderImpl::TimestepEncoderImpl(int64_t dim, Act act, double time_factor, const Init& init)
    : dim_(dim), time_factor_(time_factor), frequencies_(std::make_shared<DeviceCopies>(sinusoidal_frequencies(dim))) {
  blocks_ = register_module("blocks", TwoLayer(dim, dim, act, init));
}

torch::Tensor TimestepEncoderImpl::forward(const torch::Tensor& t) const {
  const auto frequencies = frequencies_->on(t.device());
  return blocks_->forward(sinusoidal_embedding(t, frequencies, dim_, time_factor_)).unsqueeze(1);
}

// ---------------------------------------------------------------------------------------------------
// Positional and time encodings

torch::Tensor sinusoidal_frequencies(int64_t dim) {
  const int64_t half = dim / 2;
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat32);
  // Reference order: (−log(10000) · k) / half, all float32, then exp.
  const auto log_temp = torch::log(torch::tensor(10000.0f, f32));
  return torch::exp(-log_temp * torch::arange(0, half, f32) / half);
}

torch::Tensor sinusoidal_embedding(const torch::Tensor& t, int64_t dim, double time_factor) {
  return sinusoidal_embedding(t, sinusoidal_frequencies(dim).to(t.device()), dim, time_factor);
}

torch::Tensor sinusoidal_embedding(const torch::Tensor& t, const torch::Tensor& frequencies, int64_t dim,
                                   double time_factor) {
  ZEST_CHECK(t.dim() == 1, "timesteps must be 1-D [B], got ", t.sizes());
  const auto scaled = t * time_factor;
  const auto args = scaled.unsqueeze(1).to(torch::kFloat32) * frequencies.unsqueeze(0);
  auto emb = torch::cat({torch::cos(args), torch::sin(args)}, -1);
  if (dim % 2 != 0) emb = torch::cat({emb, torch::zeros_like(emb.narrow(1, 0, 1))}, -1);
  return emb;
}

Rope Rope::make(int64_t length, int64_t head_dim) {
  ZEST_CHECK(length <= kRopeMaxPositions, "sequence of ", length, " tokens exceeds the ", kRopeMaxPositions,
             " RoPE positions of the reference");
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat32);
  const auto dim_t = torch::arange(0, head_dim, 2, f32);
  const auto exponent = 2 * torch::div(dim_t, 2, "trunc") / head_dim;
  const auto freqs = torch::reciprocal(torch::pow(10000, exponent));  // Python's 1.0 / tensor
  const auto angles = torch::outer(torch::arange(length, f32), freqs);  // [length, d/2]
  return {angles.cos().repeat_interleave(2, 1), angles.sin().repeat_interleave(2, 1)};
}

Rope RopeTables::on(int64_t length, int64_t head_dim, const torch::Device& device) {
  const std::lock_guard<std::mutex> lock(mutex_);
  auto found = tables_.find({length, head_dim});
  if (found == tables_.end()) {
    Rope host = Rope::make(length, head_dim);
    found = tables_.try_emplace({length, head_dim}, host.cos, host.sin).first;
  }
  return {found->second.first.on(device), found->second.second.on(device)};
}

namespace {
// (x0, x1, x2, x3, ...) → (−x1, x0, −x3, x2, ...): the interleaved-pair partner of each element.
torch::Tensor rotate_pairs(const torch::Tensor& x) {
  auto sizes = x.sizes().vec();
  sizes.back() /= 2;
  sizes.push_back(2);
  const auto pairs = x.reshape(sizes).unbind(-1);
  return torch::stack({-pairs[1], pairs[0]}, -1).flatten(-2);
}

torch::Tensor rotate(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  const auto xf = x.to(torch::kFloat32);
  const auto c = cos.to(x.device()).unsqueeze(1);  // [S, 1, d] broadcasts over [B, S, H, d]
  const auto s = sin.to(x.device()).unsqueeze(1);
  return (xf * c + rotate_pairs(xf) * s).to(x.scalar_type());
}
}  // namespace

torch::Tensor apply_rope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  if (uses_rope_kernels(x, cos, sin)) return rope_with_kernels(x, cos, sin);  // CUDA: one kernel each way
  const int64_t rotated = cos.size(0);
  const int64_t seq = x.size(1);
  ZEST_CHECK(rotated <= seq, "RoPE table of ", rotated, " positions for a sequence of ", seq);
  if (rotated == seq) return rotate(x, cos, sin);
  return torch::cat({rotate(x.narrow(1, 0, rotated), cos, sin), x.narrow(1, rotated, seq - rotated)}, 1);
}

// ---------------------------------------------------------------------------------------------------
// Attention

std::vector<torch::Tensor> split_qkv(const torch::Tensor& qkv, int64_t num_heads) {
  const int64_t width = qkv.size(-1) / 3;
  ZEST_CHECK(qkv.size(-1) == 3 * width && width % num_heads == 0, "qkv width ", qkv.size(-1),
             " is not 3 × heads ", num_heads, " × head_dim");
  // unbind, not three selects: its backward stacks the three gradients in one kernel, where each
  // select's backward zero-fills a full-size gradient and copies its slice in.
  const auto parts = qkv.view({qkv.size(0), qkv.size(1), 3, num_heads, width / num_heads}).unbind(2);
  return {parts[0], parts[1], parts[2]};
}

torch::Tensor attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                        const torch::Tensor& bias) {
  const auto b = bias.defined() ? bias.to(q.scalar_type()) : bias;
  if (uses_block_sparse_attention(q, k, v, b)) {  // the tiles the bias closes whole skipped (CUDA, 16-bit)
    const auto out = block_sparse_attention(q, k, v, b);  // [B, S, H, d] contiguous
    const auto joined = out.view({out.size(0), out.size(1), -1});
    return contiguous_grad(joined);
  }
  const auto out = compat::scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), b);
  const auto o = out.transpose(1, 2);  // [B, S, H, d]
  const auto joined = o.reshape({o.size(0), o.size(1), -1});
  // cuDNN's attention caches its backward graph by the layouts of q, k, v and the bias, yet builds it
  // for the layout of the output's gradient. The double block's q/k/v (from the q/k norm + RoPE kernels)
  // are laid out as the single block's, while their output gradients differ (a single block's is a slice
  // of [attention | MLP half]): one cached graph then read the other's gradient with the wrong strides,
  // which failed or read out of bounds. One gradient layout for every call keeps each graph right.
  return q.is_cuda() ? contiguous_grad(joined) : joined;
}

}  // namespace zest::hymotion
