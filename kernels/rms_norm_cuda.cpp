// The autograd function over the RMSNorm kernels (see rms_norm.h): saves x, the weight and rstd.
#include "core/check.h"
#include "kernels/rms_norm.h"
#include "kernels/kernel_tensors.h"
#include "kernels/rms_norm_op.h"

#include <torch/csrc/autograd/custom_function.h>

namespace zest {
namespace {

RmsRows rows_of(const torch::Tensor& x) {
  return {x.size(0), x.size(1), x.size(2), x.size(3), x.stride(0), x.stride(1), x.stride(2)};
}

torch::Tensor contiguous_like(const torch::Tensor& x) {
  return torch::empty(x.sizes(), x.options().memory_format(at::MemoryFormat::Contiguous));
}

struct RmsNormFunction : torch::autograd::Function<RmsNormFunction> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& weight, double eps) {
    const RmsRows rows = rows_of(x);
    auto y = contiguous_like(x);
    auto rstd = torch::empty({rows.rows()}, x.options().dtype(torch::kFloat32));
    launch_rms_norm_forward(rows, kernel_dtype_of(x.scalar_type()), x.data_ptr(), weight.data_ptr(), eps, y.data_ptr(),
                            rstd.data_ptr<float>(), current_stream_of(x));
    ctx->save_for_backward({x, weight, rstd});
    return y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto& x = saved[0];
    const auto& weight = saved[1];
    const RmsRows rows = rows_of(x);
    const auto dy = grads[0].to(x.scalar_type()).contiguous();
    auto dx = contiguous_like(x);
    auto dweight = torch::empty({rows.head_dim}, x.options().dtype(torch::kFloat32));
    auto scratch = torch::empty({rms_norm_backward_scratch(rows)}, x.options().dtype(torch::kFloat32));
    launch_rms_norm_backward(rows, kernel_dtype_of(x.scalar_type()), dy.data_ptr(), x.data_ptr(), weight.data_ptr(),
                             saved[2].data_ptr<float>(), dx.data_ptr(), dweight.data_ptr<float>(),
                             scratch.data_ptr<float>(), current_stream_of(x));
    return {dx, dweight.to(weight.scalar_type()), {}};
  }
};

}  // namespace

torch::Tensor rms_norm_with_kernels(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  ZEST_CHECK(uses_rms_norm_kernels(x, weight), "RMSNorm kernels: input not covered");
  return RmsNormFunction::apply(x, weight, eps);
}

}  // namespace zest
