// HY-Motion on CUDA (ctest label `gpu`): with zest's kernels in its blocks (modulated layer norm, gated
// residual, the attention output beside the activated MLP half) the tiny golden model gives the
// reference's output and gradients in float32, and tracks them in bf16 as the CPU path does
// (tests/hymotion/test_hymotion_precision.cpp).
#include "common/tensor_close.h"
#include "hymotion/hymotion_test_util.h"
#include "models/common/concat_gelu_op.h"
#include "models/common/gated_residual_op.h"

#include <gtest/gtest.h>

namespace zest::hymotion::test {
namespace {

using ::zest::testing::closeness;
using ::zest::testing::kGradParity;

HyMotionInputs on_gpu(HyMotionInputs in) {
  for (torch::Tensor* t : {&in.x, &in.ctxt_input, &in.vtxt_input, &in.timesteps, &in.x_mask_temporal,
                           &in.ctxt_mask_temporal}) {
    if (t->defined()) *t = t->to(torch::kCUDA);
  }
  return in;
}

double relative_l2(const torch::Tensor& a, const torch::Tensor& b) {
  const auto expected = b.to(torch::kFloat64);
  return (a.to(torch::kFloat64) - expected).norm().item<double>() / expected.norm().item<double>();
}

// The tiny model's shapes take the kernels (else these tests would check ATen's ops again).
TEST(GpuHyMotion, TheTinyShapesTakeTheKernels) {
  const auto opts = torch::TensorOptions().device(torch::kCUDA);
  const auto h = torch::randn({2, 7, 3 * 32 + 128}, opts);
  EXPECT_TRUE(uses_concat_gelu_kernels(torch::randn({2, 7, 32}, opts), h.narrow(-1, 96, 128)));
  const auto mod = torch::randn({2, 1, 6 * 32}, opts).chunk(6, -1);
  EXPECT_TRUE(uses_gated_residual_kernels(torch::randn({2, 7, 32}, opts), torch::randn({2, 7, 32}, opts), mod[2]));
}

TEST(GpuHyMotion, Float32MatchesTheReference) {
  const Golden golden = Golden::load();
  auto model = golden_model(golden);
  model->to(torch::kCUDA);
  const auto out = model->forward(on_gpu(golden.inputs()));
  EXPECT_LE(max_abs_diff(out.cpu(), golden.output("sample")), 1e-4);
  out.pow(2).mean().backward();
  for (const auto& item : model->named_parameters()) {
    ASSERT_TRUE(item.value().grad().defined()) << item.key();
    const auto c = closeness(item.value().grad().cpu(), golden.grads().at(item.key()), kGradParity);
    EXPECT_TRUE(c.ok) << item.key() << ": " << c.describe();
  }
}

// The CPU test's bounds (bf16 rounding; a zeroed gradient or a float32 part computed in bf16 is O(1)).
TEST(GpuHyMotion, Bf16TracksTheFloat32Reference) {
  const Golden golden = Golden::load();
  auto model = golden_model(golden);
  model->to(torch::kCUDA, torch::kBFloat16);
  const auto out = model->forward(on_gpu(golden.inputs()));
  EXPECT_EQ(out.scalar_type(), torch::kBFloat16);
  EXPECT_LE(relative_l2(out.cpu(), golden.output("sample")), 2e-2);
  out.to(torch::kFloat32).pow(2).mean().backward();
  for (const auto& item : model->named_parameters()) {
    const auto& grad = item.value().grad();
    ASSERT_TRUE(grad.defined()) << item.key();
    const auto& expected = golden.grads().at(item.key());
    if (expected.abs().max().item<double>() < 1e-9) continue;  // the refiner's k-norm bias: mathematically 0
    EXPECT_LE(relative_l2(grad.cpu(), expected), 1e-1) << item.key();
  }
}

}  // namespace
}  // namespace zest::hymotion::test
