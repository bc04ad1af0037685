// The UNet on CUDA (ctest label `gpu`): channels-last activations (the CUDA default) with float32
// weights give the reference's output and gradients, as the CPU does; 16-bit 1×1 convolutions run as
// accumulating products with the convolution's values and gradients; 16-bit k×k convolutions convolve a
// channels-last copy of the weight and add their weight gradients into the slots (kernels/conv_op.h).
#include "common/scoped_switch.h"
#include "common/tensor_close.h"
#include "kernels/conv_op.h"
#include "kernels/linear_op.h"
#include "models/unet/layers.h"
#include "unet/unet_test_util.h"

#include <gtest/gtest.h>

namespace zest::unet::test {
namespace {

using ::zest::testing::closeness;
using ::zest::testing::relative_l2_error;
using ::zest::testing::kGradParity;

torch::Tensor on_gpu(const torch::Tensor& t) { return t.defined() ? t.to(torch::kCUDA) : t; }

TEST(GpuUNet, ChannelsLastMatchesTheReference) {
  at::globalContext().setAllowTF32CuDNN(false);  // float32 convolutions, as the reference ran them
  const auto golden = Golden::load();
  UNet2DConditionModel model(load_config("unet_tiny"));
  load_params(model, golden.params());
  model.to(torch::kCUDA);
  const UNetConditioning cond{on_gpu(golden.input("encoder_hidden_states")), on_gpu(golden.input("text_embeds")),
                              on_gpu(golden.input("time_ids"))};
  const auto out = model.forward(on_gpu(golden.input("sample")), on_gpu(golden.input("timestep")), cond);
  EXPECT_TRUE(out.is_contiguous(at::MemoryFormat::ChannelsLast) && !out.is_contiguous());
  EXPECT_LE(max_abs_diff(out.cpu(), golden.output("sample")), 1e-4);
  out.pow(2).mean().backward();
  for (const auto& item : model.named_parameters()) {
    ASSERT_TRUE(item.value().grad().defined()) << item.key();
    const auto c = closeness(item.value().grad().cpu(), golden.grads().at(item.key()), kGradParity);
    EXPECT_TRUE(c.ok) << item.key() << ": " << c.describe();
  }
  at::globalContext().setAllowTF32CuDNN(true);
}

TEST(GpuUNet, PointwiseConvolutionsRunAsAccumulatingProducts) {
  torch::manual_seed(9);
  const auto cuda = torch::TensorOptions().device(torch::kCUDA);
  Conv2d conv(64, 96, 1, 1, 0, cuda.dtype(torch::kBFloat16));
  const auto flat = torch::zeros({96 * 64 + 96}, cuda);  // float32 slots, as the engine's
  conv->weight.mutable_grad() = flat.narrow(0, 0, 96 * 64).view({96, 64, 1, 1});
  conv->bias.mutable_grad() = flat.narrow(0, 96 * 64, 96);
  const auto x = torch::randn({2, 64, 12, 10}, cuda).to(torch::kBFloat16).contiguous(at::MemoryFormat::ChannelsLast);
  const auto r = torch::randn({2, 96, 12, 10}, cuda).to(torch::kBFloat16).to(torch::kFloat32);  // dY exact in bf16
  const auto before = linear_grad_fusion_counts();
  const auto y = conv->forward(x);
  EXPECT_TRUE(y.is_contiguous(at::MemoryFormat::ChannelsLast));
  const auto want_y = torch::conv2d(x.to(torch::kFloat64), conv->weight.detach().to(torch::kFloat64),
                                    conv->bias.detach().to(torch::kFloat64));
  EXPECT_LT(relative_l2_error(y, want_y), 4e-3);
  (y.to(torch::kFloat32) * r).sum().backward();
  EXPECT_EQ(linear_grad_fusion_counts().fused - before.fused, 1) << "the gradients went into the slots";
  // dW[o, i] = Σ r[b, o, h, w]·x[b, i, h, w], db[o] = Σ r[b, o, h, w], in float64.
  const auto r64 = r.to(torch::kFloat64), x64 = x.to(torch::kFloat64);
  const auto want_w = torch::einsum("bohw,bihw->oi", {r64, x64}).view({96, 64, 1, 1});
  EXPECT_LT(relative_l2_error(conv->weight.grad(), want_w), 1e-5);
  EXPECT_LT(relative_l2_error(conv->bias.grad(), r64.sum({0, 2, 3})), 1e-5);

  // An input that is not channels-last stays a convolution.
  const auto before_plain = linear_grad_fusion_counts();
  const auto y_plain = conv->forward(x.contiguous());
  (y_plain.to(torch::kFloat32) * r).sum().backward();
  EXPECT_EQ(linear_grad_fusion_counts().fused, before_plain.fused);
  EXPECT_LT(relative_l2_error(y_plain, want_y), 4e-3);
}

// A k×k convolution against float64 autograd: values, the input gradient, and weight and bias gradients
// accumulated over two backwards into float32 slots.
void expect_accumulating_conv(int64_t in, int64_t out, int64_t stride, int64_t height, int64_t width) {
  torch::manual_seed(10);
  const auto cuda = torch::TensorOptions().device(torch::kCUDA);
  Conv2d conv(in, out, 3, stride, 1, cuda.dtype(torch::kBFloat16));
  const int64_t weight_numel = out * in * 9;
  const auto flat = torch::zeros({weight_numel + out}, cuda);  // float32 slots, as the engine's
  conv->weight.mutable_grad() = flat.narrow(0, 0, weight_numel).view({out, in, 3, 3});
  conv->bias.mutable_grad() = flat.narrow(0, weight_numel, out);
  auto x = torch::randn({2, in, height, width}, cuda).to(torch::kBFloat16).contiguous(at::MemoryFormat::ChannelsLast);
  x.requires_grad_(true);
  ASSERT_TRUE(uses_accumulating_conv(x, conv->weight, conv->bias));
  const auto before = linear_grad_fusion_counts();
  const auto y = conv->forward(x);
  EXPECT_TRUE(y.is_contiguous(at::MemoryFormat::ChannelsLast));
  const auto r = torch::randn(y.sizes(), cuda).to(torch::kBFloat16).to(torch::kFloat32);  // dY exact in bf16
  (y.to(torch::kFloat32) * r).sum().backward();
  (conv->forward(x).to(torch::kFloat32) * r).sum().backward();  // a second micro-step accumulates
  EXPECT_EQ(linear_grad_fusion_counts().fused - before.fused, 2) << "the gradients went into the slots";

  auto x64 = x.detach().to(torch::kFloat64).requires_grad_(true);
  auto w64 = conv->weight.detach().to(torch::kFloat64).requires_grad_(true);
  auto b64 = conv->bias.detach().to(torch::kFloat64).requires_grad_(true);
  const auto y64 = torch::conv2d(x64, w64, b64, {stride, stride}, {1, 1});
  (y64 * r.to(torch::kFloat64)).sum().backward();
  const std::string at = std::to_string(in) + "→" + std::to_string(out) + " stride " + std::to_string(stride);
  EXPECT_LT(relative_l2_error(y, y64), 4e-3) << at;
  EXPECT_LT(relative_l2_error(x.grad(), 2 * x64.grad()), 8e-3) << at;
  EXPECT_LT(relative_l2_error(conv->weight.grad(), 2 * w64.grad()), 8e-3) << at;
  EXPECT_LT(relative_l2_error(conv->bias.grad(), 2 * b64.grad()), 8e-3) << at;
}

TEST(GpuUNet, ConvolutionsAddChannelsLastWeightGradientsIntoTheSlots) {
  // Off by default (kernels/conv_op.h).
  const zest::testing::ScopedSwitch fusion(conv_grad_fusion_enabled, set_conv_grad_fusion, true);
  expect_accumulating_conv(64, 96, 1, 12, 10);
  expect_accumulating_conv(320, 24, 2, 9, 8);  // input channels over one kernel tile (256), a downsampler's stride
  // Switched off, or over activations that are not channels-last: torch::conv2d and autograd's gradients.
  const auto cuda = torch::TensorOptions().device(torch::kCUDA);
  Conv2d conv(16, 8, 3, 1, 1, cuda.dtype(torch::kBFloat16));
  const auto x = torch::randn({1, 16, 6, 6}, cuda).to(torch::kBFloat16);
  EXPECT_FALSE(uses_accumulating_conv(x, conv->weight, conv->bias));
  const zest::testing::ScopedSwitch off(conv_grad_fusion_enabled, set_conv_grad_fusion, false);
  EXPECT_FALSE(uses_accumulating_conv(x.contiguous(at::MemoryFormat::ChannelsLast), conv->weight, conv->bias));
}

}  // namespace
}  // namespace zest::unet::test
