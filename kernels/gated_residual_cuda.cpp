// The autograd function over the gated-residual kernels (see gated_residual.h): saves y and the gate (what
// the product's backward saves); x's gradient is the output's, passed on as it is.
#include "kernels/gated_residual.h"
#include "kernels/kernel_tensors.h"

#include <torch/csrc/autograd/custom_function.h>
#include <torch/torch.h>

namespace zest {
namespace {

// y [B, S, D] (`starts` empty), or packed [rows, D] with `starts` (int32 [B + 1]) and `longest` rows of one sample.
GatedRows rows_of(const torch::Tensor& y, const torch::Tensor& gate, const torch::Tensor& starts, int64_t longest) {
  const PackedSamples samples = packed_samples(starts, y.size(0));
  if (!samples.starts) return {y.size(0), y.size(1), y.size(2), gate.stride(0), samples};
  return {starts.size(0) - 1, longest, y.size(1), gate.stride(0), samples};
}

int width_for(int64_t dim, std::initializer_list<torch::Tensor> tensors) {
  const DataPointers pointers(tensors);
  return gated_residual_vector_width(dim, static_cast<int>(tensors.begin()->element_size()), pointers.data(),
                                     pointers.size());
}

struct GatedResidual : torch::autograd::Function<GatedResidual> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x_in,
                               const torch::Tensor& y_in, const torch::Tensor& gate, const torch::Tensor& starts,
                               int64_t longest) {
    const auto x = x_in.contiguous();
    const auto y = y_in.contiguous();
    const GatedRows rows = rows_of(y, gate, starts, longest);
    auto out = torch::empty_like(x);
    launch_gated_residual_forward(rows, width_for(rows.dim, {x, y, out}), kernel_dtype_of(x.scalar_type()),
                                  x.data_ptr(), y.data_ptr(), gate.data_ptr(), out.data_ptr(), current_stream_of(x));
    ctx->save_for_backward({y, gate, starts});
    ctx->saved_data["longest"] = longest;
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto& y = saved[0];
    const auto& gate = saved[1];
    const GatedRows rows = rows_of(y, gate, saved[2], ctx->saved_data["longest"].toInt());
    const auto d_out = grads[0].to(y.scalar_type()).contiguous();
    auto d_y = torch::empty_like(y);
    const int width = width_for(rows.dim, {d_out, y, d_y});
    const auto f32 = y.options().dtype(torch::kFloat32);
    auto d_gate = torch::empty({rows.batch, 1, rows.dim}, f32);
    auto scratch = torch::empty({gated_residual_scratch(rows, width)}, f32);
    launch_gated_residual_backward(rows, width, kernel_dtype_of(y.scalar_type()), d_out.data_ptr(), y.data_ptr(),
                                   gate.data_ptr(), d_y.data_ptr(), d_gate.data_ptr<float>(),
                                   scratch.data_ptr<float>(), current_stream_of(y));
    return {d_out, d_y, d_gate.to(gate.scalar_type()), {}, {}};
  }
};

}  // namespace

torch::Tensor gated_residual_cuda(const torch::Tensor& x, const torch::Tensor& y, const torch::Tensor& gate,
                                  const SampleRows* samples) {
  if (samples == nullptr) return GatedResidual::apply(x, y, gate, unpacked_starts(x), 0);
  return GatedResidual::apply(x, y, gate, samples->starts, samples->longest);
}

}  // namespace zest
