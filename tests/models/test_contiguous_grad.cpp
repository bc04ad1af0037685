// contiguous_grad (models/common/contiguous_grad.h): the identity forward, and a backward that hands on the
// gradient contiguous in the input's memory format — for the UNet's skip join, channels-last slices.
#include "models/common/contiguous_grad.h"

#include <gtest/gtest.h>

namespace zest::testing {
namespace {

// The gradients the join's backward hands on towards h and the skip (seen by hooks on the tensors joined),
// as the UNet's up blocks join them.
std::pair<torch::Tensor, torch::Tensor> join_grads(at::MemoryFormat format, bool with_contiguous_grad) {
  torch::manual_seed(4);
  const auto h_leaf = torch::randn({2, 6, 5, 3}).contiguous(format).requires_grad_(true);
  const auto skip_leaf = torch::randn({2, 4, 5, 3}).contiguous(format).requires_grad_(true);
  const auto h = h_leaf * 1.0, skip = skip_leaf * 1.0;
  std::pair<torch::Tensor, torch::Tensor> seen;
  h.register_hook([&seen](const torch::Tensor& g) { seen.first = g; });
  skip.register_hook([&seen](const torch::Tensor& g) { seen.second = g; });
  const auto joined = with_contiguous_grad ? torch::cat({contiguous_grad(h), contiguous_grad(skip)}, 1)
                                           : torch::cat({h, skip}, 1);
  EXPECT_TRUE(joined.is_contiguous(format));
  (joined * torch::randn({2, 10, 5, 3})).sum().backward();
  return seen;
}

TEST(ContiguousGrad, HandsOnGradientsInTheInputsMemoryFormat) {
  for (const auto format : {at::MemoryFormat::ChannelsLast, at::MemoryFormat::Contiguous}) {
    const auto [h_grad, skip_grad] = join_grads(format, true);
    const auto [h_plain, skip_plain] = join_grads(format, false);
    EXPECT_TRUE(h_grad.is_contiguous(format)) << static_cast<int>(format);
    EXPECT_TRUE(skip_grad.is_contiguous(format)) << static_cast<int>(format);
    EXPECT_FALSE(h_plain.is_contiguous(format)) << "the join alone hands on strided slices";
    EXPECT_TRUE(torch::equal(h_grad, h_plain)) << "the values are the join's";
    EXPECT_TRUE(torch::equal(skip_grad, skip_plain));
  }
  // A forward is a view of its input, values and all.
  const auto x = torch::randn({3, 4});
  const auto y = contiguous_grad(x);
  EXPECT_EQ(y.data_ptr(), x.data_ptr());
}

}  // namespace
}  // namespace zest::testing
