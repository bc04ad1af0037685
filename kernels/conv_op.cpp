// conv2d and its switch (see conv_op.h); the CUDA autograd function is in conv_cuda.cpp.
#include "kernels/conv_op.h"

#include "core/kernel_switches.h"
#include "kernels/linear_op.h"

namespace zest {

#ifdef ZEST_WITH_CUDA
torch::Tensor accumulating_conv2d_cuda(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                                       int64_t stride, int64_t padding);
bool conv_weight_kernels_take(const torch::Tensor& weight);
#endif

namespace {
// Off by default: on one H200 it saved 1.1 ms of a 237 ms SD1.5 step (within the spread of two runs) for
// 1.0 GiB more peak memory, the kept weight copies (bench/RESULTS.md, twelfth session).
KernelSwitch& conv_switch() {  // [engine.kernels] conv_grad_fusion (core/kernel_switches.h)
  static KernelSwitch& on = kernel_switch("conv_grad_fusion");
  return on;
}
}  // namespace

bool conv_grad_fusion_enabled() { return conv_switch().enabled(); }
void set_conv_grad_fusion(bool enabled) { conv_switch().set(enabled); }

bool uses_accumulating_conv(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
#ifdef ZEST_WITH_CUDA
  return conv_grad_fusion_enabled() && trains_into_grad_slots(weight, bias) && weight.dim() == 4 &&
         weight.is_contiguous() && x.dim() == 4 && x.scalar_type() == weight.scalar_type() &&
         x.device() == weight.device() &&
         x.is_contiguous(at::MemoryFormat::ChannelsLast) && x.size(1) == weight.size(1) && x.numel() > 0 &&
         conv_weight_kernels_take(weight);
#else
  (void)x, (void)weight, (void)bias;
  return false;
#endif
}

torch::Tensor conv2d(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias, int64_t stride,
                     int64_t padding) {
#ifdef ZEST_WITH_CUDA
  if (uses_accumulating_conv(x, weight, bias)) return accumulating_conv2d_cuda(x, weight, bias, stride, padding);
#endif
  return torch::conv2d(x, weight, bias, {stride, stride}, {padding, padding});
}

}  // namespace zest
