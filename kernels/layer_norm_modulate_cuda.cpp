// The autograd function over the modulated layer-norm kernels (see layer_norm_modulate.h): saves x, shift, scale
// and the row statistics; backward gives x's, shift's and scale's gradients. The affine norm is the same function
// with the bias as the shift, the weight as the multiplier and every row one sample's.
#include "core/check.h"
#include "kernels/kernel_tensors.h"
#include "kernels/layer_norm_modulate.h"
#include "kernels/layer_norm_modulate_op.h"

#include <torch/csrc/autograd/custom_function.h>

namespace zest {
namespace {

// x [B, S, D] (`starts` empty), or packed [rows, D] with `starts` (int32 [B + 1]) and `longest` rows of one sample.
ModulatedRows rows_of(const torch::Tensor& x, const torch::Tensor& shift, const torch::Tensor& scale,
                      const torch::Tensor& starts, int64_t longest) {
  const PackedSamples samples = packed_samples(starts, x.size(0));
  if (!samples.starts) return {x.size(0), x.size(1), x.size(2), shift.stride(0), scale.stride(0), samples};
  return {starts.size(0) - 1, longest, x.size(1), shift.stride(0), scale.stride(0), samples};
}

// Every row of x [..., D] one sample's, weight and bias shared: the affine norm's rows.
ModulatedRows affine_rows_of(const torch::Tensor& x) {
  ModulatedRows rows{1, x.numel() / x.size(-1), x.size(-1), 0, 0, {}};
  rows.affine = true;
  return rows;
}

// The modulated norm (shift and scale per sample), or with `affine` the affine norm (shift the bias, scale the
// weight, both [D]; starts and longest unused).
struct LayerNormModulateKernels : torch::autograd::Function<LayerNormModulateKernels> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x_in,
                               const torch::Tensor& shift, const torch::Tensor& scale, double eps,
                               const torch::Tensor& starts, int64_t longest, bool affine) {
    const auto x = x_in.contiguous();
    const ModulatedRows rows = affine ? affine_rows_of(x) : rows_of(x, shift, scale, starts, longest);
    auto y = torch::empty_like(x);
    auto mean = torch::empty({rows.rows()}, x.options().dtype(torch::kFloat32));
    auto rstd = torch::empty({rows.rows()}, x.options().dtype(torch::kFloat32));
    launch_layer_norm_modulate_forward(rows, kernel_dtype_of(x.scalar_type()), x.data_ptr(), shift.data_ptr(),
                                       scale.data_ptr(), eps, y.data_ptr(), mean.data_ptr<float>(),
                                       rstd.data_ptr<float>(), current_stream_of(x));
    ctx->save_for_backward({x, shift, scale, mean, rstd, starts});
    ctx->saved_data["longest"] = longest;
    ctx->saved_data["affine"] = affine;
    return y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto& x = saved[0];
    const auto& shift = saved[1];
    const auto& scale = saved[2];
    const ModulatedRows rows = ctx->saved_data["affine"].toBool()
                                   ? affine_rows_of(x)
                                   : rows_of(x, shift, scale, saved[5], ctx->saved_data["longest"].toInt());
    const auto dy = grads[0].to(x.scalar_type()).contiguous();
    auto dx = torch::empty_like(x);
    const auto f32 = x.options().dtype(torch::kFloat32);
    auto dshift_dscale = torch::empty({2, rows.batch, 1, rows.dim}, f32);
    auto scratch = torch::empty({layer_norm_modulate_scratch(rows)}, f32);
    launch_layer_norm_modulate_backward(rows, kernel_dtype_of(x.scalar_type()), dy.data_ptr(), x.data_ptr(),
                                        scale.data_ptr(), saved[3].data_ptr<float>(), saved[4].data_ptr<float>(),
                                        dx.data_ptr(), dshift_dscale.data_ptr<float>(), scratch.data_ptr<float>(),
                                        current_stream_of(x));
    return {dx, dshift_dscale[0].view(shift.sizes()).to(shift.scalar_type()),
            dshift_dscale[1].view(scale.sizes()).to(scale.scalar_type()), {}, {}, {}, {}};
  }
};

}  // namespace

torch::Tensor layer_norm_affine_with_kernels(const torch::Tensor& x, const torch::Tensor& weight,
                                             const torch::Tensor& bias, double eps) {
  ZEST_CHECK(uses_layer_norm_affine_kernels(x, weight, bias), "affine layer-norm kernels: input not covered");
  return LayerNormModulateKernels::apply(x, bias, weight, eps, unpacked_starts(x), 0, /*affine=*/true);
}

torch::Tensor layer_norm_modulate_with_kernels(const torch::Tensor& x, const torch::Tensor& shift,
                                               const torch::Tensor& scale, double eps, const SampleRows* samples) {
  ZEST_CHECK(uses_layer_norm_modulate_kernels(x, shift, scale, samples),
             "modulated layer-norm kernels: input not covered");
  if (samples == nullptr) return LayerNormModulateKernels::apply(x, shift, scale, eps, unpacked_starts(x), 0, false);
  return LayerNormModulateKernels::apply(x, shift, scale, eps, samples->starts, samples->longest, false);
}

}  // namespace zest
