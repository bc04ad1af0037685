// The autograd function over the RoPE kernels (see rope.h): saves only the tables.
#include "core/check.h"
#include "kernels/rope.h"
#include "kernels/kernel_tensors.h"
#include "kernels/rope_op.h"

#include <torch/csrc/autograd/custom_function.h>

namespace zest {
namespace {

RopeShape shape_of(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& out) {
  RopeShape shape{x.size(0), x.size(1), x.size(2), x.size(3), cos.size(0)};
  const void* pointers[2] = {x.data_ptr(), out.data_ptr()};
  shape.vector_width = rope_vector_width(shape.head_dim, static_cast<int>(x.element_size()), pointers, 2);
  ZEST_CHECK(shape.vector_width > 0, "RoPE kernels: head dim ", shape.head_dim, " or alignment not covered");
  return shape;
}

struct RopeFunction : torch::autograd::Function<RopeFunction> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& cos,
                               const torch::Tensor& sin) {
    auto y = torch::empty_like(x, x.options().memory_format(at::MemoryFormat::Contiguous));
    launch_rope_forward(shape_of(x, cos, y), kernel_dtype_of(x.scalar_type()), x.data_ptr(), cos.data_ptr<float>(),
                        sin.data_ptr<float>(), y.data_ptr(), current_stream_of(x));
    ctx->save_for_backward({cos, sin});
    return y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto& cos = saved[0];
    const auto& sin = saved[1];
    const auto dy = grads[0].contiguous();
    auto dx = torch::empty_like(dy, dy.options().memory_format(at::MemoryFormat::Contiguous));
    launch_rope_backward(shape_of(dy, cos, dx), kernel_dtype_of(dy.scalar_type()), dy.data_ptr(), cos.data_ptr<float>(),
                         sin.data_ptr<float>(), dx.data_ptr(), current_stream_of(dy));
    return {dx, {}, {}};
  }
};

}  // namespace

torch::Tensor rope_with_kernels(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  ZEST_CHECK(uses_rope_kernels(x, cos, sin), "RoPE kernels: input not covered");
  return RopeFunction::apply(x, cos, sin);
}

}  // namespace zest
