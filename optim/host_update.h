// The optimizer's host update: one fused pass of the configured rule (optim/optimizers.h) over one
// contiguous range of the fp32 master and optimizer state, reading gradients in their reduce dtype and
// writing parameters in their compute dtype. The CPU optimizer and the offloaded one both run it. Built
// without errno for sqrt and with every scalar in a local, so the loops vectorise (CMakeLists.txt).
#pragma once

#include "optim/optimizers.h"

#include <c10/core/ScalarType.h>

#include <cstdint>

namespace zest {

// n elements: master and state (fp32, updated in place), the gradient (read) and the parameter (written).
struct HostRange {
  float* master;
  float* state[kMaxStates];  // the rule's state tensors at the range (unused slots: null)
  const void* grad;
  c10::ScalarType grad_dtype;
  void* param;                  // null (param_dtype Undefined): no parameter copy to write
  c10::ScalarType param_dtype;
  int64_t n;
};

// True for the dtypes the passes read and write: fp32, bf16, fp16.
bool is_host_update_dtype(c10::ScalarType dtype);
// One update of the range with rule `kind`; `decay`: weight decay applies to it.
void host_update(OptimizerKind kind, const OptimHyper& hyper, const StepValues& step, bool decay,
                 const HostRange& range);

}  // namespace zest
