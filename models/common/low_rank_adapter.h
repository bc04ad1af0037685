// LowRankAdapter: one LoRA adapter on a Linear or Conv layer, as peft defines it: delta(x) = s·B(A(dropout(x)))
// with s = alpha/rank (times a sampling-time multiplier), A ("lora_A.weight" [rank, in] or a convolution's
// [rank, in, k, k]) and B ("lora_B.weight" [out, rank] or [out, rank, 1, 1]). The adapted layer
// (linear_layer.h, conv_layer.h) registers the two factors as its submodules "lora_A" and "lora_B", so their
// state-dict names are the layer's name + ".lora_A.weight": the names peft and diffusers save and load.
#pragma once

#include <torch/torch.h>

#include <cstdint>

namespace zest {

// One factor: a module holding only "weight", so the factor's parameter is named "<factor>.weight".
class LoraFactorImpl : public torch::nn::Module {
 public:
  explicit LoraFactorImpl(torch::Tensor initial) { weight = register_parameter("weight", std::move(initial)); }
  torch::Tensor weight;
};
TORCH_MODULE(LoraFactor);

// What an adapter is made with; the shapes follow from the layer.
struct LowRankShape {
  int64_t rank = 0;
  double alpha = 0.0;    // the scale is alpha / rank (peft's lora_alpha / r)
  double dropout = 0.0;  // on the adapter's input only, in training (peft's lora_dropout)
};

class LowRankAdapter {
 public:
  // Registers lora_A and lora_B on `layer`. A is drawn as peft's default init (kaiming_uniform_(a=√5), the
  // global CPU generator), B is zero: the adapted layer starts equal to the base layer. `kernel` is 0 for a
  // Linear; a convolution's A is [rank, in, kernel, kernel] with the layer's stride and padding, B 1×1.
  LowRankAdapter(torch::nn::Module& layer, int64_t in, int64_t out, int64_t kernel, const LowRankShape& shape,
                 const torch::TensorOptions& options);

  // s·B(A(dropout(x))) for a Linear's input [.., in] in the factors' dtype.
  torch::Tensor linear_delta(const torch::Tensor& x, bool is_training) const;
  // The same for a convolution's input [B, in, H, W] (A with the layer's stride and padding).
  torch::Tensor conv_delta(const torch::Tensor& x, int64_t stride, int64_t padding, bool is_training) const;
  // s·B·A in the base weight's shape ([out, in] or [out, in, k, k]), float32: what folding adds to W.
  torch::Tensor weight_delta() const;

  int64_t rank() const { return shape_.rank; }
  double alpha() const { return shape_.alpha; }
  double scale() const { return shape_.alpha / static_cast<double>(shape_.rank) * multiplier_; }
  // Sampling's --lora-scale: the adapter's output times `multiplier` (1 in training).
  void set_multiplier(double multiplier) { multiplier_ = multiplier; }
  const torch::Tensor& down() const { return down_->weight; }  // A
  const torch::Tensor& up() const { return up_->weight; }      // B

 private:
  torch::Tensor dropped(const torch::Tensor& x, bool is_training) const;

  LowRankShape shape_;
  double multiplier_ = 1.0;
  LoraFactor down_{nullptr};
  LoraFactor up_{nullptr};
};

}  // namespace zest
