// split_linear and its switch (see split_linear_op.h); the CUDA autograd function is in
// split_linear_cuda.cpp.
#include "kernels/split_linear_op.h"

#include "core/check.h"
#include "core/kernel_switches.h"
#include "kernels/linear_op.h"

#include <numeric>

namespace zest {

#ifdef ZEST_WITH_CUDA
std::vector<torch::Tensor> split_linear_cuda(const torch::Tensor& x, const torch::Tensor& weight,
                                             const torch::Tensor& bias, const std::vector<int64_t>& sizes,
                                             bool gelu_of_last);
#endif

namespace {
KernelSwitch& split_switch() {  // [engine.kernels] split_linear (core/kernel_switches.h)
  static KernelSwitch& on = kernel_switch("split_linear");
  return on;
}
}  // namespace

bool split_linear_enabled() { return split_switch().enabled(); }
void set_split_linear(bool enabled) { split_switch().set(enabled); }

namespace {

std::vector<torch::Tensor> split_products(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                                          const std::vector<int64_t>& sizes, bool gelu_of_last) {
  ZEST_CHECK(std::accumulate(sizes.begin(), sizes.end(), int64_t{0}) == weight.size(0),
             "split_linear: the parts' sizes must add up to the weight's ", weight.size(0), " rows");
#ifdef ZEST_WITH_CUDA
  if (split_linear_enabled() && uses_accumulating_linear(x, weight, bias)) {
    return split_linear_cuda(x, weight, bias, sizes, gelu_of_last);
  }
#endif
  auto parts = linear(x, weight, bias).split_with_sizes(sizes, -1);
  if (gelu_of_last) parts.emplace_back();  // no epilogue here: the consumer runs GELU
  return parts;
}

}  // namespace

std::vector<torch::Tensor> split_linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                                        const std::vector<int64_t>& sizes) {
  return split_products(x, weight, bias, sizes, /*gelu_of_last=*/false);
}

std::vector<torch::Tensor> split_linear_with_gelu_of_last(const torch::Tensor& x, const torch::Tensor& weight,
                                                          const torch::Tensor& bias, const std::vector<int64_t>& sizes) {
  return split_products(x, weight, bias, sizes, /*gelu_of_last=*/true);
}

}  // namespace zest
