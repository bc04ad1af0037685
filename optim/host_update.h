// The offloaded optimizer's host update: fused AdamW and SGD passes over one contiguous range of the
// fp32 master and optimizer state, reading gradients in their reduce dtype and writing parameters in
// their compute dtype (PyTorch's update rules, as optim/cpu_optimizers.cpp). Built without errno for
// sqrt and with every scalar in a local, so the loops vectorise (CMakeLists.txt).
#pragma once

#include <c10/core/ScalarType.h>

#include <cstdint>

namespace zest {

// One step's numbers for the host update, in fp32 as the update computes.
struct HostUpdate {
  float lr, multiplier, weight_decay, beta1, beta2, eps, step_size, bias_correction2_sqrt, momentum;
  bool nesterov, first_sgd_step;
};

// n elements: master and state (fp32, updated in place), the gradient (read) and the parameter (written).
struct HostRange {
  float* master;
  float* first;   // exp_avg (AdamW) or the momentum buffer (SGD; null without momentum)
  float* second;  // exp_avg_sq (AdamW)
  const void* grad;
  c10::ScalarType grad_dtype;
  void* param;
  c10::ScalarType param_dtype;
  int64_t n;
};

// True for the dtypes the passes read and write: fp32, bf16, fp16.
bool is_host_update_dtype(c10::ScalarType dtype);
void adamw_update(const HostUpdate& u, bool decay, const HostRange& r);
void sgd_update(const HostUpdate& u, bool decay, const HostRange& r);

}  // namespace zest
