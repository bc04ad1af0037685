// LinearLayer (see linear_layer.h): the choice of product for each form, and the adapter's place in it.
// Without an adapter each form calls exactly the op the blocks called before the seam existed, so kernels
// and numerics are unchanged; with one, the base product is the plain composition (its frozen weight takes
// no fused-gradient path anyway: kernels/linear_op.h's conditions need a trainable weight) plus the adapter's delta.
#include "models/common/linear_layer.h"

#include "core/check.h"
#include "kernels/concat_gelu_op.h"
#include "kernels/joined_linear_op.h"
#include "kernels/linear_op.h"
#include "kernels/residual_linear_op.h"
#include "kernels/shared_input_linear_op.h"
#include "kernels/split_linear_op.h"

namespace zest {

void LinearLayer::register_weights(torch::Tensor initial_weight, torch::Tensor initial_bias) {
  weight = register_parameter("weight", std::move(initial_weight));
  if (initial_bias.defined()) bias = register_parameter("bias", std::move(initial_bias));
}

torch::Tensor LinearLayer::with_delta(const torch::Tensor& base_output, const torch::Tensor& input) const {
  return base_output + adapter_->linear_delta(input, is_training());
}

torch::Tensor LinearLayer::forward(const torch::Tensor& x) const {
  const auto input = x.to(weight.scalar_type());
  const auto y = zest::linear(input, weight, bias);  // fused gradient accumulation on CUDA
  return adapter_ ? with_delta(y, input) : y;
}

torch::Tensor LinearLayer::forward_plus(const torch::Tensor& x, const torch::Tensor& residual) const {
  if (adapter_) return forward(x) + residual;
  return linear_plus(x.to(weight.scalar_type()), weight, bias, residual);
}

std::vector<torch::Tensor> LinearLayer::forward_split(const torch::Tensor& x, const std::vector<int64_t>& sizes,
                                                      bool gelu_of_last) const {
  if (!adapter_) {
    return gelu_of_last ? split_linear_with_gelu_of_last(x, weight, bias, sizes) : split_linear(x, weight, bias, sizes);
  }
  auto parts = forward(x).split_with_sizes(sizes, -1);
  if (gelu_of_last) parts.emplace_back();  // no epilogue: the consumer runs GELU
  return parts;
}

bool LinearLayer::recomputes(RecomputedActivation f, const torch::Tensor& a) const {
  return !adapter_ && uses_recomputed_linear(f, a, weight, bias);
}

torch::Tensor LinearLayer::forward_of_activation(RecomputedActivation f, const torch::Tensor& a,
                                                 const torch::Tensor& b, const torch::Tensor& activated) const {
  if (recomputes(f, a)) return linear_of_recomputed(f, a, b, weight, bias, activated);
  return forward(apply_activation(f, a, b));
}

torch::Tensor LinearLayer::forward_joined_gelu(const torch::Tensor& left, const torch::Tensor& right,
                                               const torch::Tensor& activated) const {
  if (!adapter_) return joined_gelu_linear(left, right, weight, bias, activated);
  return forward(concat_gelu_tanh(left, right));
}

std::vector<torch::Tensor> LinearLayer::forward_shared_input(const torch::Tensor& x,
                                                             const std::vector<const LinearLayer*>& layers) {
  ZEST_CHECK(!layers.empty(), "forward_shared_input: no layers");
  std::vector<torch::Tensor> weights, biases;
  bool adapted = false;
  for (const LinearLayer* layer : layers) {
    ZEST_CHECK(layer->weight.scalar_type() == layers.front()->weight.scalar_type(),
               "forward_shared_input: the layers' weights differ in dtype");
    weights.push_back(layer->weight);
    biases.push_back(layer->bias);
    adapted = adapted || layer->adapter_;
  }
  const auto input = x.to(weights.front().scalar_type());
  if (!adapted) return shared_input_linear(input, weights, biases);
  std::vector<torch::Tensor> outputs;
  for (const LinearLayer* layer : layers) outputs.push_back(layer->forward(x));
  return outputs;
}

void LinearLayer::attach_adapter(const LowRankShape& shape) {
  ZEST_CHECK(!adapter_, "this Linear already has a LoRA adapter");
  adapter_ = std::make_unique<LowRankAdapter>(*this, in_features(), out_features(), /*kernel=*/0, shape,
                                              weight.options().requires_grad(false));
}

void LinearLayer::fold_adapter_into_weight() {
  ZEST_CHECK(adapter_, "fold_adapter_into_weight: this Linear has no adapter");
  torch::NoGradGuard no_grad;
  weight.copy_(weight.to(torch::kFloat32) + adapter_->weight_delta().to(weight.device()));
  adapter_->set_multiplier(0.0);  // its delta is in the weight now: the layer's output is unchanged
}

}  // namespace zest
