// The autograd function over the GEGLU kernels (see geglu.h): saves only the projection.
#include "kernels/geglu.h"
#include "kernels/kernel_tensors.h"

#include <torch/csrc/autograd/custom_function.h>
#include <torch/torch.h>

namespace zest {
namespace {

int width_for(int64_t inner, const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& c = {}) {
  const void* pointers[3] = {a.data_ptr(), b.data_ptr(), c.defined() ? c.data_ptr() : a.data_ptr()};
  return geglu_vector_width(inner, static_cast<int>(a.element_size()), pointers, 3);
}

struct Geglu : torch::autograd::Function<Geglu> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& proj) {
    const int64_t inner = proj.size(-1) / 2, rows = proj.numel() / (2 * inner);
    auto sizes = proj.sizes().vec();
    sizes.back() = inner;
    auto out = torch::empty(sizes, proj.options());
    launch_geglu_forward(rows, inner, width_for(inner, proj, out), kernel_dtype_of(proj.scalar_type()), proj.data_ptr(),
                         out.data_ptr(), current_stream_of(proj));
    ctx->save_for_backward({proj});
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto proj = ctx->get_saved_variables()[0];
    const auto d_out = grads[0].to(proj.scalar_type()).contiguous();
    const int64_t inner = proj.size(-1) / 2, rows = proj.numel() / (2 * inner);
    auto d_proj = torch::empty_like(proj);
    launch_geglu_backward(rows, inner, width_for(inner, proj, d_out, d_proj), kernel_dtype_of(proj.scalar_type()),
                          proj.data_ptr(), d_out.data_ptr(), d_proj.data_ptr(), current_stream_of(proj));
    return {d_proj};
  }
};

}  // namespace

torch::Tensor geglu_cuda(const torch::Tensor& proj) { return Geglu::apply(proj); }

}  // namespace zest
