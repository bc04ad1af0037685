// Tensor glue for the channels-last group-norm kernels (see group_norm_nhwc.h and group_norm_nhwc_op.h): which
// inputs they take, the outputs and scratch allocated on the current stream, the launch.
#include "core/check.h"
#include "kernels/group_norm_nhwc.h"
#include "kernels/group_norm_nhwc_op.h"
#include "kernels/kernel_tensors.h"

#include <torch/torch.h>


namespace zest {
namespace {

GroupNormShape shape_of(const torch::Tensor& x, int64_t groups, std::initializer_list<const void*> pointers) {
  GroupNormShape shape{x.size(0), x.size(2) * x.size(3), x.size(1), groups, 0};
  shape.vector_width = group_norm_nhwc_vector_width(shape.c, groups, static_cast<int>(x.element_size()),
                                                    pointers.begin(), static_cast<int>(pointers.size()));
  return shape;
}

torch::Tensor floats(int64_t numel, const torch::Tensor& like) {
  return torch::empty({numel}, like.options().dtype(torch::kFloat32).memory_format(at::MemoryFormat::Contiguous));
}

}  // namespace

bool group_norm_nhwc_applies(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                             const torch::Tensor& shift, int64_t groups) {
  if (!x.is_cuda() || x.dim() != 4 || x.numel() == 0 || !x.is_contiguous(at::MemoryFormat::ChannelsLast)) return false;
  if (!is_kernel_dtype(x.scalar_type()) || weight.scalar_type() != x.scalar_type() ||
      bias.scalar_type() != x.scalar_type() || !weight.is_contiguous() || !bias.is_contiguous()) {
    return false;
  }
  if (shift.defined() && (shift.scalar_type() != x.scalar_type() || shift.device() != x.device() ||
                          shift.sizes() != torch::IntArrayRef{x.size(0), x.size(1)} || !shift.is_contiguous())) {
    return false;
  }
  return shape_of(x, groups, {x.data_ptr()}).vector_width > 0;
}

GroupNormForward group_norm_nhwc_forward(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                                         const torch::Tensor& shift, int64_t groups, double eps, bool silu) {
  GroupNormForward out;
  out.y = torch::empty_like(x, x.options().memory_format(at::MemoryFormat::ChannelsLast));
  const GroupNormShape shape = shape_of(x, groups, {x.data_ptr(), out.y.data_ptr()});
  ZEST_CHECK(shape.vector_width > 0, "group norm: channels-last kernels do not cover ", x.sizes());
  out.mean = floats(shape.n * groups, x).view({shape.n, groups});
  out.rstd = floats(shape.n * groups, x).view({shape.n, groups});
  ChannelShift channel_shift;
  if (shift.defined()) {
    out.channel_means = floats(shape.n * shape.c, x).view({shape.n, shape.c});
    channel_shift.shift = shift.data_ptr();
    channel_shift.channel_means = out.channel_means.data_ptr<float>();
  }
  auto scratch = floats(group_norm_nhwc_forward_scratch(shape), x);
  launch_group_norm_nhwc_forward(shape, kernel_dtype_of(x.scalar_type()), x.data_ptr(), weight.data_ptr(), bias.data_ptr(),
                                 eps, silu, out.y.data_ptr(), out.mean.data_ptr<float>(), out.rstd.data_ptr<float>(),
                                 channel_shift, scratch.data_ptr<float>(), current_stream_of(x));
  return out;
}

GroupNormGrads group_norm_nhwc_backward(const torch::Tensor& dy_in, const torch::Tensor& x, const torch::Tensor& shift,
                                        const GroupNormForward& saved, const torch::Tensor& weight,
                                        const torch::Tensor& bias, int64_t groups, bool silu) {
  auto dy = dy_in.to(x.scalar_type()).contiguous(at::MemoryFormat::ChannelsLast);
  auto dx = torch::empty_like(x, x.options().memory_format(at::MemoryFormat::ChannelsLast));
  GroupNormShape shape = shape_of(x, groups, {x.data_ptr(), dy.data_ptr(), dx.data_ptr()});
  if (shape.vector_width == 0) {  // a misaligned gradient view: a fresh (aligned) copy
    dy = dy.clone(at::MemoryFormat::ChannelsLast);
    shape = shape_of(x, groups, {x.data_ptr(), dy.data_ptr(), dx.data_ptr()});
  }
  ZEST_CHECK(shape.vector_width > 0, "group norm: channels-last kernels do not cover ", x.sizes());
  GroupNormGrads grads{dx, floats(shape.c, x), floats(shape.c, x), {}};
  ChannelShift channel_shift;
  if (shift.defined()) {
    grads.dshift = floats(shape.n * shape.c, x).view({shape.n, shape.c});
    channel_shift.shift = shift.data_ptr();
    channel_shift.channel_means = saved.channel_means.data_ptr<float>();
    channel_shift.dshift = grads.dshift.data_ptr<float>();
  }
  auto scratch = floats(group_norm_nhwc_backward_scratch(shape), x);
  launch_group_norm_nhwc_backward(shape, kernel_dtype_of(x.scalar_type()), dy.data_ptr(), x.data_ptr(),
                                  saved.mean.data_ptr<float>(), saved.rstd.data_ptr<float>(), weight.data_ptr(),
                                  bias.data_ptr(), silu, dx.data_ptr(), grads.dweight.data_ptr<float>(),
                                  grads.dbias.data_ptr<float>(), channel_shift, scratch.data_ptr<float>(),
                                  current_stream_of(x));
  return grads;
}

}  // namespace zest
