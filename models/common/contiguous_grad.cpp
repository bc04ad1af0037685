// contiguous_grad (see contiguous_grad.h): a one-line autograd function.
#include "models/common/contiguous_grad.h"

#include <torch/csrc/autograd/custom_function.h>

namespace zest {
namespace {

struct ContiguousGrad : torch::autograd::Function<ContiguousGrad> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x) {
    ctx->saved_data["format"] = static_cast<int64_t>(x.suggest_memory_format());
    return x.view_as(x);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto format = static_cast<at::MemoryFormat>(ctx->saved_data["format"].toInt());
    return {grads[0].contiguous(format)};  // a no-op where the gradient already is
  }
};

}  // namespace

torch::Tensor contiguous_grad(const torch::Tensor& x) { return ContiguousGrad::apply(x); }

}  // namespace zest
