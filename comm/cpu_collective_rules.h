// What the CPU communicators (MPI and Gloo) ask of their operands and how they reduce 16-bit floats: one
// set of rules, so both backends accept and refuse the same calls.
#pragma once

#include "core/check.h"

#include <torch/torch.h>

namespace zest {

inline bool is_half_float(torch::Dtype dtype) { return dtype == torch::kBFloat16 || dtype == torch::kFloat16; }

// The dtype a reduction is computed in: 16-bit floats go through fp32.
inline torch::Dtype reduction_dtype(torch::Dtype dtype) { return is_half_float(dtype) ? torch::kFloat32 : dtype; }

// `backend` names the communicator in the message ("MPI", "Gloo").
inline void check_cpu_contiguous(const torch::Tensor& t, const char* what, const char* backend) {
  ZEST_CHECK(t.device().is_cpu(), what, ": ", backend, " communicator needs CPU tensors, got ", t.device());
  ZEST_CHECK(t.is_contiguous(), what, ": tensor must be contiguous");
}

// Whether the bytes of a and b overlap (an in-place collective's input and output).
inline bool overlaps(const torch::Tensor& a, const torch::Tensor& b) {
  const auto* a0 = static_cast<const char*>(a.data_ptr());
  const auto* b0 = static_cast<const char*>(b.data_ptr());
  return a0 < b0 + b.nbytes() && b0 < a0 + a.nbytes();
}

}  // namespace zest
