// The float32 norms that save compute-dtype tensors only (models/common/fused_norms.h) have the forward
// values and the gradients of the plain op chains they replace.
#include "models/common/fused_norms.h"

#include <gtest/gtest.h>

namespace zest::testing {
namespace {

// Forward and every input gradient of `fused` and `plain` on the same leaves, for a random output weight.
void expect_same(const std::vector<torch::Tensor>& leaves_in,
                 const std::function<torch::Tensor(const std::vector<torch::Tensor>&)>& fused,
                 const std::function<torch::Tensor(const std::vector<torch::Tensor>&)>& plain, double tol) {
  auto run = [&](const auto& fn) {
    std::vector<torch::Tensor> leaves;
    for (const auto& t : leaves_in) leaves.push_back(t.detach().clone().requires_grad_(true));
    auto out = fn(leaves);
    torch::manual_seed(11);
    (out.to(torch::kFloat32) * torch::randn(out.sizes())).sum().backward();
    std::vector<torch::Tensor> result{out.detach().to(torch::kFloat32)};
    for (const auto& l : leaves) result.push_back(l.grad().to(torch::kFloat32));
    return result;
  };
  const auto a = run(fused), b = run(plain);
  for (size_t i = 0; i < a.size(); ++i) {
    const double scale = std::max(b[i].abs().max().item<double>(), 1e-6);
    EXPECT_LE((a[i] - b[i]).abs().max().item<double>() / scale, tol) << (i == 0 ? "output" : "gradient ") << i;
  }
}

TEST(FusedNorms, LayerNormModulateMatchesTheOpChain) {
  torch::manual_seed(1);
  const auto x = torch::randn({2, 5, 16}) * 2 + 3, shift = torch::randn({2, 1, 16}), scale = torch::randn({2, 1, 16});
  expect_same({x, shift, scale}, [](const auto& l) { return layer_norm_modulate(l[0], l[1], l[2], 1e-6); },
              [](const auto& l) { return torch::layer_norm(l[0], {16}, {}, {}, 1e-6) * (1 + l[2]) + l[1]; }, 1e-5);
}

TEST(FusedNorms, LayerNormAffineMatchesTheOp) {
  torch::manual_seed(2);
  const auto x = torch::randn({3, 7, 12}), w = torch::randn({12}), b = torch::randn({12});
  expect_same({x, w, b}, [](const auto& l) { return layer_norm_affine(l[0], l[1], l[2], 1e-5); },
              [](const auto& l) { return torch::layer_norm(l[0], {12}, l[1], l[2], 1e-5); }, 1e-5);
}

TEST(FusedNorms, GroupNormSiluMatchesTheOpChain) {
  torch::manual_seed(3);
  const auto x = torch::randn({2, 8, 5, 3}) * 3 - 1, w = torch::randn({8}), b = torch::randn({8});
  for (bool silu : {false, true}) {
    expect_same({x, w, b}, [silu](const auto& l) { return group_norm_silu(l[0], 4, l[1], l[2], 1e-5, silu); },
                [silu](const auto& l) {
                  auto y = torch::group_norm(l[0], 4, l[1], l[2], 1e-5);
                  return silu ? torch::silu(y) : y;
                },
                1e-5);
  }
}

// Inputs that are views with other strides (a permute, as some UNet paths produce) work the same.
TEST(FusedNorms, NonContiguousInputs) {
  torch::manual_seed(5);
  const auto x = torch::randn({2, 5, 3, 8}).permute({0, 3, 1, 2});  // [2, 8, 5, 3], not contiguous
  const auto w = torch::randn({8}), b = torch::randn({8});
  ASSERT_FALSE(x.is_contiguous());
  expect_same({x, w, b}, [](const auto& l) { return group_norm_silu(l[0], 4, l[1], l[2], 1e-5, true); },
              [](const auto& l) { return torch::silu(torch::group_norm(l[0], 4, l[1], l[2], 1e-5)); }, 1e-5);
  const auto y = torch::randn({4, 6, 3}).transpose(0, 1);  // [6, 4, 3]
  const auto shift = torch::randn({1, 3}), scale = torch::randn({1, 3});
  expect_same({y, shift, scale}, [](const auto& l) { return layer_norm_modulate(l[0], l[1], l[2], 1e-6); },
              [](const auto& l) { return torch::layer_norm(l[0], {3}, {}, {}, 1e-6) * (1 + l[2]) + l[1]; }, 1e-5);
}

// In bf16 the result is the float32 result rounded once, and the input's gradient comes back in bf16.
TEST(FusedNorms, Bf16InputsGiveTheRoundedFloat32Result) {
  torch::manual_seed(4);
  const auto x = (torch::randn({2, 8, 4, 4}) * 4 + 20).to(torch::kBFloat16).requires_grad_(true);
  const auto w = torch::randn({8}).to(torch::kBFloat16).requires_grad_(true);
  const auto b = torch::randn({8}).to(torch::kBFloat16).requires_grad_(true);
  const auto out = group_norm_silu(x, 2, w, b, 1e-5, true);
  const auto exact = torch::silu(torch::group_norm(x.detach().to(torch::kFloat32), 2, w.detach().to(torch::kFloat32),
                                                   b.detach().to(torch::kFloat32), 1e-5));
  EXPECT_TRUE(torch::equal(out.detach(), exact.to(torch::kBFloat16)));
  out.to(torch::kFloat32).sum().backward();
  EXPECT_EQ(x.grad().scalar_type(), torch::kBFloat16);
  EXPECT_EQ(w.grad().scalar_type(), torch::kBFloat16);
}

}  // namespace
}  // namespace zest::testing
