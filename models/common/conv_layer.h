// ConvLayer: the one seam every model 2-D convolution goes through, as LinearLayer (linear_layer.h) is for
// Linear: it decides how the convolution runs — a pointwise one over channels-last activations as the
// accumulating product (kernels/linear_op.h), the accumulating convolution (kernels/conv_op.h), or
// torch::conv2d — and it is where a layer's LoRA adapter attaches (low_rank_adapter.h: A a convolution
// with the layer's kernel, stride and padding, B 1×1, as peft's Conv2d LoRA).
#pragma once

#include "models/common/low_rank_adapter.h"

#include <torch/torch.h>

#include <cstdint>
#include <memory>

namespace zest {

class ConvLayer : public torch::nn::Module {
 public:
  // x is cast to the weights' dtype first, as autocast does.
  torch::Tensor forward(const torch::Tensor& x) const;
  // The convolution alone (and the adapter's delta), for a caller that adds the bias together with another
  // per-channel term.
  torch::Tensor forward_without_bias(const torch::Tensor& x) const;
  // forward(x) + residual; a pointwise convolution over channels-last activations makes the sum in its product
  // (kernels/residual_linear_op.h).
  torch::Tensor forward_plus(const torch::Tensor& x, const torch::Tensor& residual) const;

  // ---- adapters (as LinearLayer's) ----
  void attach_adapter(const LowRankShape& shape);
  bool has_adapter() const { return adapter_ != nullptr; }
  LowRankAdapter* adapter() const { return adapter_.get(); }
  void fold_adapter_into_weight();  // as LinearLayer's
  int64_t in_features() const { return weight.size(1); }
  int64_t out_features() const { return weight.size(0); }

  torch::Tensor weight;  // [out, in, k, k]
  torch::Tensor bias;    // [out]

 protected:
  void register_weights(torch::Tensor initial_weight, torch::Tensor initial_bias, int64_t stride, int64_t padding);

 private:
  torch::Tensor convolve(const torch::Tensor& x, const torch::Tensor& b) const;
  // x in the weights' dtype is channels-last and this convolution 1×1 with stride 1 and no padding: one product
  // over x's [pixels, in] rows.
  bool is_pointwise_over(const torch::Tensor& input) const;

  int64_t stride_ = 1;
  int64_t padding_ = 0;
  std::unique_ptr<LowRankAdapter> adapter_;
};

}  // namespace zest
