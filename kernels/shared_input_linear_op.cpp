// shared_input_linear and its switch (see shared_input_linear_op.h); the CUDA autograd function is in
// shared_input_linear_cuda.cpp.
#include "kernels/shared_input_linear_op.h"

#include "core/check.h"
#include "core/kernel_switches.h"
#include "kernels/linear_op.h"

namespace zest {

#ifdef ZEST_WITH_CUDA
std::vector<torch::Tensor> shared_input_linear_cuda(const torch::Tensor& x, const std::vector<torch::Tensor>& weights,
                                                    const std::vector<torch::Tensor>& biases);
#endif

namespace {
KernelSwitch& shared_input_switch() {  // [engine.kernels] shared_input_linear (core/kernel_switches.h)
  static KernelSwitch& on = kernel_switch("shared_input_linear");
  return on;
}

// Layer i's bias, or an undefined tensor.
torch::Tensor layer_bias(const std::vector<torch::Tensor>& biases, size_t i) {
  return i < biases.size() ? biases[i] : torch::Tensor();
}
}  // namespace

bool shared_input_linear_enabled() { return shared_input_switch().enabled(); }
void set_shared_input_linear(bool enabled) { shared_input_switch().set(enabled); }

bool uses_shared_input_linear(const torch::Tensor& x, const std::vector<torch::Tensor>& weights,
                              const std::vector<torch::Tensor>& biases) {
  if (!shared_input_linear_enabled() || weights.size() < 2) return false;
  for (size_t i = 0; i < weights.size(); ++i) {
    if (!uses_accumulating_linear(x, weights[i], layer_bias(biases, i))) return false;
  }
  return true;
}

std::vector<torch::Tensor> shared_input_linear(const torch::Tensor& x, const std::vector<torch::Tensor>& weights,
                                               const std::vector<torch::Tensor>& biases) {
  ZEST_CHECK(biases.empty() || biases.size() == weights.size(),
             "shared_input_linear: one bias (or an undefined tensor) per weight, or none");
#ifdef ZEST_WITH_CUDA
  if (uses_shared_input_linear(x, weights, biases)) return shared_input_linear_cuda(x, weights, biases);
#endif
  std::vector<torch::Tensor> outputs;
  for (size_t i = 0; i < weights.size(); ++i) outputs.push_back(linear(x, weights[i], layer_bias(biases, i)));
  return outputs;
}

}  // namespace zest
