// zest's channels-last group-norm kernels (ctest label `gpu`) against ATen's float32 group norm and
// SiLU through autograd: output and the three gradients, for the group sizes the UNets use (10..80
// channels), odd spatial sizes, with and without SiLU, in float32 and bf16; and bitwise repeatable.
#include "models/common/fused_norms.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

namespace zest::testing {
namespace {

struct Case {
  int64_t n, c, h, w, groups;
};

double relative_error(const torch::Tensor& got, const torch::Tensor& want) {
  const auto want_f = want.to(torch::kFloat64);
  return (got.to(torch::kFloat64) - want_f).abs().max().item<double>() /
         std::max(1e-12, want_f.abs().max().item<double>());
}

struct Result {
  torch::Tensor y, dx, dweight, dbias;
};

Result run_zest(const torch::Tensor& x0, const torch::Tensor& w0, const torch::Tensor& b0, const torch::Tensor& r,
                int64_t groups, bool silu) {
  auto x = x0.clone().requires_grad_(true);
  auto w = w0.clone().requires_grad_(true);
  auto b = b0.clone().requires_grad_(true);
  EXPECT_TRUE(uses_group_norm_kernels(x, w, b, groups));
  auto y = group_norm_silu(x, groups, w, b, 1e-5, silu);
  EXPECT_TRUE(y.is_contiguous(at::MemoryFormat::ChannelsLast));
  (y.to(torch::kFloat32) * r).sum().backward();
  return {y.detach(), x.grad(), w.grad(), b.grad()};
}

Result run_reference(const torch::Tensor& x0, const torch::Tensor& w0, const torch::Tensor& b0,
                     const torch::Tensor& r, int64_t groups, bool silu) {
  auto x = x0.to(torch::kFloat32).contiguous().requires_grad_(true);
  auto w = w0.to(torch::kFloat32).requires_grad_(true);
  auto b = b0.to(torch::kFloat32).requires_grad_(true);
  auto y = torch::group_norm(x, groups, w, b, 1e-5);
  if (silu) y = torch::silu(y);
  (y * r).sum().backward();
  return {y.detach(), x.grad(), w.grad(), b.grad()};
}

TEST(GpuGroupNorm, ChannelsLastKernelsMatchAtenInFloat32AndBf16) {
  torch::manual_seed(7);
  const std::vector<Case> cases = {{3, 320, 16, 16, 32}, {2, 2560, 8, 8, 32}, {2, 960, 5, 7, 32},
                                   {2, 1920, 9, 4, 32},  {2, 640, 130, 3, 32}, {2, 8, 3, 3, 4}};
  for (const auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    const double tolerance = dtype == torch::kFloat32 ? 1e-4 : 2e-2;
    for (const auto& k : cases) {
      for (const bool silu : {false, true}) {
        SCOPED_TRACE(::testing::Message() << "dtype " << dtype << " shape [" << k.n << ", " << k.c << ", " << k.h
                                          << ", " << k.w << "] groups " << k.groups << " silu " << silu);
        const auto cuda = torch::TensorOptions().device(torch::kCUDA);
        // An offset and a scale per channel, so a variance formula that cancels would show.
        const auto x = (torch::randn({k.n, k.c, k.h, k.w}, cuda) * 3 + torch::randn({1, k.c, 1, 1}, cuda) * 5)
                           .to(dtype)
                           .contiguous(at::MemoryFormat::ChannelsLast);
        const auto w = (1 + 0.5 * torch::randn({k.c}, cuda)).to(dtype);
        const auto b = (0.5 * torch::randn({k.c}, cuda)).to(dtype);
        const auto r = torch::randn({k.n, k.c, k.h, k.w}, cuda);
        const Result got = run_zest(x, w, b, r, k.groups, silu);
        const Result want = run_reference(x, w, b, r, k.groups, silu);
        EXPECT_LE(relative_error(got.y, want.y), tolerance);
        EXPECT_LE(relative_error(got.dx, want.dx), tolerance);
        EXPECT_LE(relative_error(got.dweight, want.dweight), tolerance);
        EXPECT_LE(relative_error(got.dbias, want.dbias), tolerance);
        const Result again = run_zest(x, w, b, r, k.groups, silu);
        EXPECT_TRUE(got.y.equal(again.y) && got.dx.equal(again.dx) && got.dweight.equal(again.dweight));
      }
    }
  }
}

// NCHW activations keep ATen's path (the kernels take channels-last only).
TEST(GpuGroupNorm, NchwActivationsUseAten) {
  const auto cuda = torch::TensorOptions().device(torch::kCUDA);
  const auto x = torch::randn({2, 64, 8, 8}, cuda);
  EXPECT_FALSE(uses_group_norm_kernels(x, torch::ones({64}, cuda), torch::zeros({64}, cuda), 32));
  EXPECT_TRUE(uses_group_norm_kernels(x.contiguous(at::MemoryFormat::ChannelsLast), torch::ones({64}, cuda),
                                      torch::zeros({64}, cuda), 32));
}

}  // namespace
}  // namespace zest::testing
