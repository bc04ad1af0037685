// The largest difference between two 8-bit pictures of one size, in pixel steps: sampled pictures are
// compared within one step, since float rounding of another CPU (AVX2 or AVX-512 kernels, another thread
// count) can move a value across a rounding boundary of the uint8 conversion.
#pragma once

#include <torch/torch.h>

namespace zest::testing {

// One step: rounding, never a different picture (a missing prompt or a wrong scheduler moves many pixels
// by tens of steps).
constexpr int kPixelRounding = 1;

inline int largest_pixel_step(const torch::Tensor& a, const torch::Tensor& b) {
  TORCH_CHECK(a.sizes() == b.sizes(), "pictures of different sizes: ", a.sizes(), " and ", b.sizes());
  return (a.to(torch::kInt32) - b.to(torch::kInt32)).abs().max().item<int>();
}

}  // namespace zest::testing
