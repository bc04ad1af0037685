// LowRankAdapter (see low_rank_adapter.h): peft's LoRA forward, initialisation and fold-in.
#include "models/common/low_rank_adapter.h"

#include "core/check.h"
#include "kernels/linear_op.h"

#include <cmath>

namespace zest {

LowRankAdapter::LowRankAdapter(torch::nn::Module& layer, int64_t in, int64_t out, int64_t kernel,
                               const LowRankShape& shape, const torch::TensorOptions& options)
    : shape_(shape) {
  ZEST_CHECK(shape.rank >= 1, "LoRA rank must be >= 1, got ", shape.rank);
  auto a = kernel == 0 ? torch::empty({shape.rank, in}, options) : torch::empty({shape.rank, in, kernel, kernel}, options);
  auto b = kernel == 0 ? torch::zeros({out, shape.rank}, options) : torch::zeros({out, shape.rank, 1, 1}, options);
  if (!options.device().is_meta()) {
    torch::NoGradGuard no_grad;
    torch::nn::init::kaiming_uniform_(a, std::sqrt(5.0));  // peft's reset_lora_parameters(init_lora_weights=True)
  }
  down_ = layer.register_module("lora_A", LoraFactor(a));
  up_ = layer.register_module("lora_B", LoraFactor(b));
}

torch::Tensor LowRankAdapter::dropped(const torch::Tensor& x, bool is_training) const {
  return shape_.dropout > 0.0 ? torch::dropout(x, shape_.dropout, is_training) : x;
}

// Through zest::linear, so on CUDA the factors' gradients accumulate into their .grad slots (kernels/linear_op.h).
torch::Tensor LowRankAdapter::linear_delta(const torch::Tensor& x, bool is_training) const {
  const auto input = dropped(x.to(down().scalar_type()), is_training);
  return zest::linear(zest::linear(input, down(), torch::Tensor()), up(), torch::Tensor()) * scale();
}

torch::Tensor LowRankAdapter::conv_delta(const torch::Tensor& x, int64_t stride, int64_t padding,
                                         bool is_training) const {
  const auto input = dropped(x.to(down().scalar_type()), is_training);
  const auto reduced = torch::conv2d(input, down(), torch::Tensor(), {stride, stride}, {padding, padding});
  return torch::conv2d(reduced, up()) * scale();
}

torch::Tensor LowRankAdapter::weight_delta() const {
  const auto a = down().to(torch::kFloat32);
  const auto b = up().to(torch::kFloat32);
  if (a.dim() == 2) return torch::matmul(b, a) * scale();
  // A [r, in, k, k] after B [out, r, 1, 1]: one [out, in·k·k] product, viewed as the kernel.
  const auto product = torch::matmul(b.flatten(1), a.flatten(1));
  return product.view({b.size(0), a.size(1), a.size(2), a.size(3)}) * scale();
}

}  // namespace zest
