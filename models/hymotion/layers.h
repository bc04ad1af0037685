// HY-Motion building blocks shared by the refiner and the MMDiT blocks: Linear with reference init that
// can live on the meta device, per-head q/k norms, modulation, MLPs, sinusoidal time embedding, RoPE and
// multi-head attention over [B, S, H, d] tensors (docs/models.md 1.4, 1.11). Mixed precision follows the
// reference under autocast (docs/models.md 5): the compute dtype is the parameters' dtype.
#pragma once

#include "core/device_copies.h"
#include "kernels/kernel_tensors.h"
#include "models/common/linear_layer.h"

#include "models/hymotion/hymotion_config.h"

#include <torch/torch.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace zest::hymotion {

// Parameters are created with these options; on torch::kMeta nothing is allocated (counting, shapes).
struct Init {
  torch::TensorOptions options = torch::TensorOptions().dtype(torch::kFloat32);
  bool is_meta() const { return options.device().is_meta(); }
};

torch::Tensor activate(const torch::Tensor& x, Act act);
// cat([left, activate(right, act)], -1): with GELU_tanh one kernel each way on CUDA
// (kernels/concat_gelu_op.h).
torch::Tensor concat_activated(const torch::Tensor& left, const torch::Tensor& right, Act act);
// LayerNorm over the last axis without affine parameters, eps 1e-6 (blocks and final layer). Every
// LayerNorm here computes in float32 and returns float32, as under autocast.
torch::Tensor layer_norm_plain(const torch::Tensor& x);
// x·(1 + scale) + shift, broadcasting [B, 1, D] over the sequence.
torch::Tensor modulate(const torch::Tensor& x, const torch::Tensor& shift, const torch::Tensor& scale);
// modulate(layer_norm_plain(x), shift, scale) cast to x's dtype (the next Linear would cast it): the same
// float32 values, but backward keeps only x and the statistics (models/common/fused_norms.h). What the
// blocks and the final layer run. With `samples`, x is packed rows [rows, D] of per-sample [B, 1, D] shift and
// scale (kernels/kernel_tensors.h).
torch::Tensor norm_modulate(const torch::Tensor& x, const torch::Tensor& shift, const torch::Tensor& scale,
                            const SampleRows* samples = nullptr);

// nn.Linear: weight [out, in], optional bias; default init U(±1/√in) drawn weight then bias, exactly as
// PyTorch's reset_parameters (same CPU generator, so torch::manual_seed gives the reference's values). How
// the product runs (and a LoRA adapter) is the seam's (models/common/linear_layer.h).
class LinearImpl : public LinearLayer {
 public:
  LinearImpl(int64_t in, int64_t out, bool bias, const Init& init);
  // Zeroes weight and bias (ModulateDiT and FinalLayer(zero_init)), after the default draw as in the
  // reference, so the generator stream stays aligned.
  void zero_();
};
TORCH_MODULE(Linear);

// LayerNorm with affine parameters, eps 1e-6, over the last axis (refiner norm1/norm2).
class AffineLayerNormImpl : public torch::nn::Module {
 public:
  AffineLayerNormImpl(int64_t dim, const Init& init);
  torch::Tensor forward(const torch::Tensor& x) const;
  torch::Tensor weight, bias;  // [dim]
};
TORCH_MODULE(AffineLayerNorm);

// Per-head norm of q or k over the head dim: the reference RMSNorm (normalised in float32, cast back,
// then times weight), an affine LayerNorm (float32 result; the caller casts to v's dtype), or identity.
// The epsilon of every norm in the model (the reference's 1e-6).
inline constexpr double kNormEpsilon = 1e-6;

class HeadNormImpl : public torch::nn::Module {
 public:
  HeadNormImpl(QkNorm kind, int64_t head_dim, const Init& init);
  torch::Tensor forward(const torch::Tensor& x) const;
  // For the fused q/k norm + RoPE kernels (kernels/qk_norm_rope_op.h): an RMSNorm's weight, else undefined.
  torch::Tensor rms_weight() const { return kind_ == QkNorm::rms ? weight_ : torch::Tensor(); }

 private:
  QkNorm kind_;
  torch::Tensor weight_, bias_;
};
TORCH_MODULE(HeadNorm);

// ModulateDiT: linear(SiLU(c)), Linear D → factor·D, zero-initialised (parameter prefix "linear").
class ModulationImpl : public torch::nn::Module {
 public:
  ModulationImpl(int64_t dim, int64_t factor, Act act, bool zero_init, const Init& init);
  // c [B, 1, D] → `factor` chunks of [B, 1, D].
  std::vector<torch::Tensor> forward(const torch::Tensor& c) const;

 private:
  Act act_;
  int64_t factor_;
  Linear linear_{nullptr};
};
TORCH_MODULE(Modulation);

// MLP: fc2(act(fc1(x))).
class MlpImpl : public torch::nn::Module {
 public:
  MlpImpl(int64_t dim, int64_t hidden, Act act, const Init& init);
  torch::Tensor forward(const torch::Tensor& x) const;

 private:
  Act act_;
  Linear fc1_{nullptr}, fc2_{nullptr};
};
TORCH_MODULE(Mlp);

// Linear → act → Linear, the reference's nn.Sequential: parameters "0.*" and "2.*" (index 1 is the
// parameter-free activation).
class TwoLayerImpl : public torch::nn::Module {
 public:
  TwoLayerImpl(int64_t in, int64_t dim, Act act, const Init& init);
  torch::Tensor forward(const torch::Tensor& x) const;

 private:
  Act act_;
  Linear first_{nullptr}, second_{nullptr};
};
TORCH_MODULE(TwoLayer);

// MLPEncoder(num_layers=2): its Sequential is named "linears".
class MlpEncoderImpl : public torch::nn::Module {
 public:
  MlpEncoderImpl(int64_t in, int64_t dim, Act act, const Init& init);
  torch::Tensor forward(const torch::Tensor& x) const { return linears_->forward(x); }

 private:
  TwoLayer linears_{nullptr};
};
TORCH_MODULE(MlpEncoder);

// TimestepEmbeddingEncoder: sinusoidal E(t·time_factor; dim) → Sequential "blocks" → [B, 1, D].
class TimestepEncoderImpl : public torch::nn::Module {
 public:
  TimestepEncoderImpl(int64_t dim, Act act, double time_factor, const Init& init);
  torch::Tensor forward(const torch::Tensor& t) const;

 private:
  int64_t dim_;
  double time_factor_;
  std::shared_ptr<DeviceCopies> frequencies_;  // sinusoidal_frequencies(dim_), uploaded once per device
  TwoLayer blocks_{nullptr};
};
TORCH_MODULE(TimestepEncoder);

// exp(−ln(10000)·k/half) for k < half = dim/2, float32 on the host, in the reference's operation order.
torch::Tensor sinusoidal_frequencies(int64_t dim);
// [cos(a) | sin(a)] with a = (t·time_factor)·frequencies (a zero column is appended for odd dims), in
// float32. t [B] → [B, dim]. The second form takes the frequencies already on t's device.
torch::Tensor sinusoidal_embedding(const torch::Tensor& t, int64_t dim, double time_factor);
torch::Tensor sinusoidal_embedding(const torch::Tensor& t, const torch::Tensor& frequencies, int64_t dim,
                                   double time_factor);

// RoPE tables (use_real, theta 10000) for positions 0..length-1, interleaved pairs: [length, head_dim].
struct Rope {
  torch::Tensor cos, sin;
  static Rope make(int64_t length, int64_t head_dim);
};

// Rope tables by (length, head_dim), made on the host once and kept on each device they are asked on.
class RopeTables {
 public:
  Rope on(int64_t length, int64_t head_dim, const torch::Device& device);

 private:
  std::mutex mutex_;
  std::map<std::pair<int64_t, int64_t>, std::pair<DeviceCopies, DeviceCopies>> tables_;
};
// Rotates the first rope.cos.size(0) tokens of q or k [B, S, H, d] (computed in float32, cast back);
// on CUDA through zest's kernels (kernels/rope.h), the same values.
torch::Tensor apply_rope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);

// Splits a [B, S, 3·H·d] projection laid out [q | k | v] × heads into three [B, S, H, d] tensors.
std::vector<torch::Tensor> split_qkv(const torch::Tensor& qkv, int64_t num_heads);
// SDPA over [B, S, H, d] tensors with an additive bias [B, 1, S, S]; returns [B, S, H·d]. On CUDA in 16-bit
// zest's block-sparse kernels run it where they apply (kernels/block_sparse_attention_op.h), LibTorch's elsewhere.
torch::Tensor attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                        const torch::Tensor& bias);

}  // namespace zest::hymotion
