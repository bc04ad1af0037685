// The autograd function over the [left | GELU_tanh(right)] kernels (see concat_gelu.h): saves right (what
// GELU's backward saves); left's gradient is a view of the output's.
#include "kernels/concat_gelu.h"
#include "kernels/kernel_tensors.h"

#include <torch/csrc/autograd/custom_function.h>
#include <torch/torch.h>

namespace zest {
namespace {

// The row stride of a [B, L, W] tensor whose B·L rows are evenly spaced (uses_concat_gelu_kernels).
int64_t row_stride(const torch::Tensor& t) { return t.size(1) == 1 && t.size(0) > 1 ? t.stride(0) : t.stride(1); }

ConcatRows rows_of(const torch::Tensor& left, const torch::Tensor& right) {
  return {left.size(0) * left.size(1), left.size(2), right.size(2), row_stride(left), row_stride(right)};
}

int width_for(const ConcatRows& rows, std::initializer_list<torch::Tensor> tensors) {
  const DataPointers pointers(tensors);
  return concat_gelu_vector_width(rows, static_cast<int>(tensors.begin()->element_size()), pointers.data(),
                                  pointers.size());
}

struct ConcatGelu : torch::autograd::Function<ConcatGelu> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& left,
                               const torch::Tensor& right) {
    const ConcatRows rows = rows_of(left, right);
    auto out = torch::empty({left.size(0), left.size(1), rows.width()}, left.options());
    launch_concat_gelu_forward(rows, width_for(rows, {left, right, out}), kernel_dtype_of(left.scalar_type()),
                               left.data_ptr(), right.data_ptr(), out.data_ptr(), current_stream_of(left));
    ctx->save_for_backward({right});
    ctx->saved_data["left_width"] = rows.left_width;
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto right = ctx->get_saved_variables()[0];
    const int64_t left_width = ctx->saved_data["left_width"].toInt();
    // Backward reads no left: its stride is only a width the packs need not step over.
    const ConcatRows rows{right.size(0) * right.size(1), left_width, right.size(2), left_width, row_stride(right)};
    const auto d_out = grads[0].to(right.scalar_type()).contiguous();
    auto d_right = torch::empty(right.sizes(), right.options());
    launch_concat_gelu_backward(rows, width_for(rows, {d_out, right, d_right}), kernel_dtype_of(right.scalar_type()),
                                d_out.data_ptr(), right.data_ptr(), d_right.data_ptr(), current_stream_of(right));
    return {d_out.narrow(-1, 0, left_width), d_right};
  }
};

}  // namespace

torch::Tensor concat_gelu_cuda(const torch::Tensor& left, const torch::Tensor& right) {
  return ConcatGelu::apply(left, right);
}

}  // namespace zest
