// Float32 norms that save compute-dtype tensors only (see fused_norms.h): custom autograd functions over
// ATen's own layer/group norm kernels and their backward kernels.
#include "kernels/fused_paths.h"
#include "models/common/fused_norms.h"

#include "kernels/layer_norm_modulate_op.h"
#ifdef ZEST_WITH_CUDA
#include "kernels/group_norm_nhwc_op.h"
#endif

#include <ATen/ExpandUtils.h>
#include <torch/csrc/autograd/custom_function.h>

namespace zest {

// Whether the channels-last kernels run this group norm (a CUDA build, channels-last activations).
bool uses_group_norm_kernels(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                             int64_t groups, const torch::Tensor& shift) {
#ifdef ZEST_WITH_CUDA
  if (!x.is_cuda()) return false;
  const bool covered = group_norm_nhwc_applies(x, weight, bias, shift, groups);
  note_fused_path("group_norm_nhwc", covered,
                  "activations not channels-last, channels not a multiple of groups, or a shift not [N, C] of their "
                  "dtype");
  return covered;
#else
  (void)x, (void)weight, (void)bias, (void)groups, (void)shift;
  return false;
#endif
}

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

torch::Tensor f32(const torch::Tensor& t) { return t.to(torch::kFloat32); }
// Float32 in NCHW order (what ATen's group-norm kernels take) in one copy, whatever t's layout.
torch::Tensor f32_nchw(const torch::Tensor& t) {
  return t.to(torch::kFloat32, /*non_blocking=*/false, /*copy=*/false, at::MemoryFormat::Contiguous);
}
// Back to `like`'s dtype and memory layout (channels-last activations stay channels-last) in one copy.
torch::Tensor as_activation(const torch::Tensor& t, const torch::Tensor& like) {
  return t.to(like.scalar_type(), /*non_blocking=*/false, /*copy=*/false, like.suggest_memory_format());
}

// The gradient of a broadcast operand: summed back to its own shape and dtype.
torch::Tensor reduce_to(const torch::Tensor& grad, const torch::Tensor& like) {
  return at::sum_to(grad, like.sizes()).to(like.scalar_type());
}

struct LayerNormModulate : torch::autograd::Function<LayerNormModulate> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& shift,
                               const torch::Tensor& scale, double eps) {
    const int64_t dim = x.size(-1);
    auto [normed, mean, rstd] = at::native_layer_norm(f32(x).contiguous(), {dim}, {}, {}, eps);
    ctx->save_for_backward({x, shift, scale, mean, rstd});
    ctx->saved_data["eps"] = eps;
    // (1 + scale) in scale's own dtype, as the op chain computes it (autocast leaves that add alone).
    return (normed * f32(1 + scale) + f32(shift)).to(x.scalar_type());
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto& x = saved[0];
    const auto& shift = saved[1];
    const auto& scale = saved[2];
    const auto& mean = saved[3];
    const auto& rstd = saved[4];
    const auto g = f32(grads[0]);
    const auto xf = f32(x).contiguous();
    const auto normed = (xf - mean) * rstd;
    const auto grad_normed = (g * f32(1 + scale)).contiguous();
    auto parts = at::native_layer_norm_backward(grad_normed, xf, {x.size(-1)}, mean, rstd, {}, {},
                                                {true, false, false});
    return {std::get<0>(parts).to(x.scalar_type()), reduce_to(g, shift), reduce_to(g * normed, scale), {}};
  }
};

// On CUDA, ATen's layer-norm kernels take compute-dtype tensors directly and compute in float32 (their
// accumulate type), which gives autocast's float32 values without float32 copies of x and its gradient.
bool is_native_mixed_layer_norm(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  return x.is_cuda() && weight.scalar_type() == x.scalar_type() && bias.scalar_type() == x.scalar_type();
}

struct LayerNormAffine : torch::autograd::Function<LayerNormAffine> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& weight,
                               const torch::Tensor& bias, double eps) {
    if (is_native_mixed_layer_norm(x, weight, bias)) {
      auto [out, mean, rstd] = at::native_layer_norm(x.contiguous(), {x.size(-1)}, weight, bias, eps);
      ctx->save_for_backward({x, weight, bias, mean, rstd});
      return out;
    }
    auto [out, mean, rstd] = at::native_layer_norm(f32(x).contiguous(), {x.size(-1)}, f32(weight), f32(bias), eps);
    ctx->save_for_backward({x, weight, bias, mean, rstd});
    return out.to(x.scalar_type());
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto& x = saved[0];
    const auto& weight = saved[1];
    const auto& bias = saved[2];
    if (is_native_mixed_layer_norm(x, weight, bias)) {
      auto parts = at::native_layer_norm_backward(grads[0].to(x.scalar_type()).contiguous(), x.contiguous(),
                                                  {x.size(-1)}, saved[3], saved[4], weight, bias, {true, true, true});
      return {std::get<0>(parts), std::get<1>(parts), std::get<2>(parts), {}};
    }
    auto parts = at::native_layer_norm_backward(f32(grads[0]).contiguous(), f32(x).contiguous(), {x.size(-1)}, saved[3],
                                                saved[4], f32(weight),
                                                f32(bias), {true, true, true});
    return {std::get<0>(parts).to(x.scalar_type()), std::get<1>(parts).to(weight.scalar_type()),
            std::get<2>(parts).to(bias.scalar_type()), {}};
  }
};

#ifdef ZEST_WITH_CUDA
// zest's channels-last kernels (kernels/group_norm_nhwc_op.h), the shift inside (absent: absent_tensor).
struct GroupNormKernels : torch::autograd::Function<GroupNormKernels> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& weight,
                               const torch::Tensor& bias, const torch::Tensor& shift_or_absent, int64_t groups,
                               double eps, bool silu) {
    GroupNormForward out = group_norm_nhwc_forward(x, weight, bias, present(shift_or_absent), groups, eps, silu);
    ctx->saved_data["groups"] = groups;
    ctx->saved_data["silu"] = silu;
    ctx->save_for_backward({x, weight, bias, shift_or_absent, out.mean, out.rstd, out.channel_means});
    return out.y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto& x = saved[0];
    const auto& weight = saved[1];
    const auto& bias = saved[2];
    const torch::Tensor shift = present(saved[3]);
    const GroupNormForward statistics{{}, saved[4], saved[5], saved[6]};
    GroupNormGrads g = group_norm_nhwc_backward(grads[0], x, shift, statistics, weight, bias,
                                                ctx->saved_data["groups"].toInt(), ctx->saved_data["silu"].toBool());
    return {g.dx, g.dweight.to(weight.scalar_type()), g.dbias.to(bias.scalar_type()),
            shift.defined() ? g.dshift.to(shift.scalar_type()) : torch::Tensor(), {}, {}, {}};
  }
};
#endif

// ATen's float32 group norm over an NCHW float32 copy of x.
struct GroupNormAten : torch::autograd::Function<GroupNormAten> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& weight,
                               const torch::Tensor& bias, int64_t groups, double eps, bool silu) {
    ctx->saved_data["groups"] = groups;
    ctx->saved_data["eps"] = eps;
    ctx->saved_data["silu"] = silu;
    const int64_t n = x.size(0), c = x.size(1), hw = x.numel() / (n * c);
    auto [out, mean, rstd] = at::native_group_norm(f32_nchw(x), f32(weight), f32(bias), n, c, hw, groups, eps);
    ctx->save_for_backward({x, weight, bias, mean, rstd});
    return as_activation(silu ? torch::silu(out) : out, x);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto& x = saved[0];
    const auto& weight = saved[1];
    const auto& bias = saved[2];
    const auto& mean = saved[3];
    const auto& rstd = saved[4];
    const int64_t groups = ctx->saved_data["groups"].toInt();
    const double eps = ctx->saved_data["eps"].toDouble();
    const bool silu = ctx->saved_data["silu"].toBool();
    const int64_t n = x.size(0), c = x.size(1), hw = x.numel() / (n * c);
    const auto xf = f32_nchw(x);
    auto g = f32_nchw(grads[0]);
    if (silu) {
      // The norm's output again (one kernel), then SiLU's own backward kernel.
      const auto y = std::get<0>(at::native_group_norm(xf, f32(weight), f32(bias), n, c, hw, groups, eps));
      g = at::silu_backward(g, y);
    }
    auto parts = at::native_group_norm_backward(g, xf, mean, rstd, f32(weight), n, c, hw, groups, {true, true, true});
    return {as_activation(std::get<0>(parts), x), std::get<1>(parts).to(weight.scalar_type()),
            std::get<2>(parts).to(bias.scalar_type()), {}, {}, {}};
  }
};

}  // namespace

torch::Tensor layer_norm_modulate(const torch::Tensor& x, const torch::Tensor& shift, const torch::Tensor& scale,
                                  double eps, const SampleRows* samples) {
  if (uses_layer_norm_modulate_kernels(x, shift, scale, samples))
    return layer_norm_modulate_with_kernels(x, shift, scale, eps, samples);
  if (samples) {  // each row's shift and scale, gathered: index_select's backward sums them per sample
    return LayerNormModulate::apply(x, shift.squeeze(1).index_select(0, samples->sample),
                                    scale.squeeze(1).index_select(0, samples->sample), eps);
  }
  return LayerNormModulate::apply(x, shift, scale, eps);
}

torch::Tensor layer_norm_affine(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                                double eps) {
  if (uses_layer_norm_affine_kernels(x, weight, bias)) return layer_norm_affine_with_kernels(x, weight, bias, eps);
  return LayerNormAffine::apply(x, weight, bias, eps);
}

torch::Tensor group_norm_silu(const torch::Tensor& x, int64_t groups, const torch::Tensor& weight,
                              const torch::Tensor& bias, double eps, bool silu, const torch::Tensor& shift) {
#ifdef ZEST_WITH_CUDA
  if (uses_group_norm_kernels(x, weight, bias, groups, shift)) {
    return GroupNormKernels::apply(x, weight, bias, shift.defined() ? shift : absent_tensor(x), groups, eps, silu);
  }
#endif
  // The shift added over the pixels (broadcast from [N, C, 1, 1]; the sum keeps x's memory layout).
  const auto input = shift.defined() ? x + shift.view({x.size(0), x.size(1), 1, 1}) : x;
  return GroupNormAten::apply(input, weight, bias, groups, eps, silu);
}

}  // namespace zest
