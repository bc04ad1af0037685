// The GELU-epilogue products (kernels/gelu_epilogue_gemm.h) on the GPU: the forward product's GELU and
// pre-activation, and the backward product through GELU's derivative, against float64 truths; they decline
// switched off or for shapes cuBLASLt's epilogues do not take; and HY-Motion's single-block path with them
// (split_linear_with_gelu_of_last into joined_gelu_linear) gives the values and gradients it gives without.
#include "common/scoped_switch.h"
#include "common/tensor_close.h"
#include "kernels/gelu_epilogue_gemm.h"
#include "kernels/joined_linear_op.h"
#include "kernels/split_linear_op.h"

#include <gtest/gtest.h>

namespace zest::testing {
namespace {

ScopedSwitch epilogue_switch(bool on) { return {gelu_epilogue_enabled, set_gelu_epilogue, on}; }

const auto kCuda = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kBFloat16);

torch::Tensor gelu64(const torch::Tensor& h) { return at::gelu(h.to(torch::kFloat64), "tanh"); }

TEST(GpuGeluEpilogue, ForwardIsTheProductThenGelu) {
  const auto on = epilogue_switch(true);
  torch::manual_seed(11);
  const auto x = torch::randn({1200, 256}, kCuda);
  // A row range of a wider weight and bias, as the MLP half of HY-Motion's linear1 is.
  const auto weight_all = (torch::randn({64 + 512, 256}, kCuda) * 0.08);
  const auto bias_all = torch::randn({64 + 512}, kCuda) * 0.5;
  const auto w = weight_all.narrow(0, 64, 512), b = bias_all.narrow(0, 64, 512);
  const auto product = linear_gelu(x, w, b);
  ASSERT_TRUE(product.has_value()) << "cuBLASLt offered no GELU_AUX_BIAS algorithm for bf16";
  const auto h = torch::addmm(b.to(torch::kFloat64), x.to(torch::kFloat64), w.to(torch::kFloat64).t());
  // One rounding to bf16 (relative 2^-9 at most per element) of a float32 result.
  EXPECT_LT(relative_l2_error(product->pre_activation, h), 3e-3);
  EXPECT_LT(relative_l2_error(product->activated, gelu64(h)), 3e-3);
  // No looser than ATen's product then GELU, which rounds twice.
  const auto aten_g = at::gelu(torch::addmm(b, x, w.t()), "tanh");
  EXPECT_LE(relative_l2_error(product->activated, gelu64(h)), relative_l2_error(aten_g, gelu64(h)) * 1.05);
}

TEST(GpuGeluEpilogue, BackwardIsTheProductThroughGelusDerivative) {
  const auto on = epilogue_switch(true);
  torch::manual_seed(12);
  const auto dy = torch::randn({1200, 64}, kCuda);
  const auto weight_all = torch::randn({64, 64 + 256}, kCuda) * 0.1;
  const auto w = weight_all.narrow(1, 64, 256);  // a column block, as linear2's MLP columns are
  const auto h = torch::randn({1200, 256}, kCuda) * 2;
  const auto dh = gelu_backward_of_product(dy, w, h);
  ASSERT_TRUE(dh.has_value()) << "cuBLASLt offered no DGELU algorithm for bf16";
  const auto truth = at::gelu_backward(torch::mm(dy.to(torch::kFloat64), w.to(torch::kFloat64)),
                                       h.to(torch::kFloat64), "tanh");
  EXPECT_LT(relative_l2_error(*dh, truth), 3e-3);
  const auto aten = at::gelu_backward(torch::mm(dy, w), h, "tanh");
  EXPECT_LE(relative_l2_error(*dh, truth), relative_l2_error(aten, truth) * 1.05);
}

TEST(GpuGeluEpilogue, DeclinesWhenOffOrForShapesItDoesNotTake) {
  const auto x = torch::randn({64, 256}, kCuda);
  const auto w = torch::randn({512, 256}, kCuda);
  const auto b = torch::randn({512}, kCuda);
  {
    const auto off = epilogue_switch(false);
    EXPECT_FALSE(linear_gelu(x, w, b).has_value());
  }
  const auto on = epilogue_switch(true);
  EXPECT_TRUE(linear_gelu(x, w, b).has_value());
  EXPECT_FALSE(linear_gelu(x, w.narrow(0, 0, 250), b.narrow(0, 0, 250)).has_value()) << "a width not a multiple of 8";
  EXPECT_FALSE(linear_gelu(x.to(torch::kFloat32), w.to(torch::kFloat32), b.to(torch::kFloat32)).has_value());
  EXPECT_FALSE(linear_gelu(x, w, torch::Tensor()).has_value()) << "no bias";
  EXPECT_FALSE(gelu_backward_of_product(torch::randn({64, 48}, kCuda), torch::randn({48, 250}, kCuda),
                                        torch::randn({64, 250}, kCuda))
                   .has_value());
}

struct BlockRun {
  torch::Tensor y, dx, dw1, db1, dw2, db2;
  bool epilogue_made_activation = false;
};

// linear1 → [q | k | v] and the MLP half; linear2 over [q's columns | GELU(MLP half)], as HY-Motion's single
// block (attention aside), with float32 .grad slots so every product takes the accumulating path.
BlockRun run_block(bool epilogue) {
  const auto sw = epilogue_switch(epilogue);
  torch::manual_seed(13);
  const int64_t dim = 64, hidden = 256;
  const auto leaf = [](torch::Tensor t) {
    t = t.to(torch::kBFloat16).requires_grad_(true);
    t.mutable_grad() = torch::zeros(t.sizes(), t.options().dtype(torch::kFloat32).requires_grad(false));
    return t;
  };
  const auto f32 = kCuda.dtype(torch::kFloat32);
  auto w1 = leaf(torch::randn({3 * dim + hidden, dim}, f32) * 0.1);
  auto b1 = leaf(torch::randn({3 * dim + hidden}, f32) * 0.3);
  auto w2 = leaf(torch::randn({dim, dim + hidden}, f32) * 0.05);
  auto b2 = leaf(torch::randn({dim}, f32) * 0.1);
  auto x = torch::randn({4, 300, dim}, kCuda).requires_grad_(true);
  const auto r = torch::randn({4, 300, dim}, kCuda.dtype(torch::kFloat32));
  const auto parts = split_linear_with_gelu_of_last(x, w1, b1, {3 * dim, hidden});
  BlockRun run;
  run.epilogue_made_activation = parts.size() == 3 && parts[2].defined();
  run.y = joined_gelu_linear(parts[0].narrow(-1, 0, dim), parts[1], w2, b2, parts[2]);
  (run.y.to(torch::kFloat32) * r).sum().backward();
  run.dx = x.grad();
  run.dw1 = w1.grad().clone();
  run.db1 = b1.grad().clone();
  run.dw2 = w2.grad().clone();
  run.db2 = b2.grad().clone();
  return run;
}

TEST(GpuGeluEpilogue, SingleBlockPathGivesTheValuesAndGradientsItGivesWithout) {
  const BlockRun with = run_block(true);
  const BlockRun without = run_block(false);
  EXPECT_TRUE(with.epilogue_made_activation);
  EXPECT_FALSE(without.epilogue_made_activation);
  // Both round to bf16; the epilogues once fewer.
  EXPECT_LT(relative_l2_error(with.y, without.y), 8e-3);
  EXPECT_LT(relative_l2_error(with.dx, without.dx), 8e-3);
  EXPECT_LT(relative_l2_error(with.dw1, without.dw1), 8e-3);
  EXPECT_LT(relative_l2_error(with.db1, without.db1), 8e-3);
  EXPECT_LT(relative_l2_error(with.dw2, without.dw2), 8e-3);
  EXPECT_LT(relative_l2_error(with.db2, without.db2), 8e-3);
  EXPECT_GT(with.dw1.abs().sum().item<double>(), 0.0);
}

}  // namespace
}  // namespace zest::testing
