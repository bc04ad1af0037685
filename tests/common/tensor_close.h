// Per-tensor closeness for the model parity suites: max|actual − expected| ≤ atol + rtol · max|expected|.
// The tolerance scales with each tensor's own magnitude, so a gradient of small values (or one zeroed
// by a bug) cannot pass on an absolute tolerance sized for the large ones.
#pragma once

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>

namespace zest::testing {

struct TensorTolerance {
  double rtol = 0.0;  // relative to max|expected| of the tensor
  double atol = 0.0;  // floor, for tensors that are mathematically zero (float32 noise only)
};

// Float32 parity of gradients: the ports reach max|Δ| / max|g| ≤ 1.2e-5 on every golden gradient
// tensor (UNet; 1.2e-6 on HY-Motion). atol covers the refiner's k-norm biases, whose gradients are
// mathematically 0 and ~1e-11 in float32; every other golden gradient has max|g| ≥ 4.5e-6, so a zeroed
// one misses by more than three orders of magnitude.
constexpr TensorTolerance kGradParity{1e-4, 1e-9};

struct Closeness {
  double max_abs_err = 0.0;
  double scale = 0.0;   // max|expected|
  double allowed = 0.0;  // atol + rtol · scale
  bool ok = false;       // false for NaN or a shape mismatch
  std::string describe() const {
    std::ostringstream text;
    text << "max|Δ| " << max_abs_err << " vs allowed " << allowed << " (max|expected| " << scale << ")";
    return text.str();
  }
};

inline Closeness closeness(const torch::Tensor& actual, const torch::Tensor& expected, const TensorTolerance& tol) {
  Closeness c;
  if (actual.sizes() != expected.sizes()) return c;
  const auto a = actual.detach().to(torch::kCPU, torch::kFloat64);
  const auto e = expected.detach().to(torch::kCPU, torch::kFloat64);
  c.max_abs_err = (a - e).abs().max().item<double>();
  c.scale = e.abs().max().item<double>();
  c.allowed = tol.atol + tol.rtol * c.scale;
  c.ok = c.max_abs_err <= c.allowed;  // NaN compares false
  return c;
}

// ‖actual − expected‖ / ‖expected‖ in float64 (L2 over all elements): one number for a whole tensor whose
// elements carry rounding of different sizes (16-bit results against a float64 truth).
inline double relative_l2_error(const torch::Tensor& actual, const torch::Tensor& expected) {
  const auto a = actual.detach().to(torch::kCPU, torch::kFloat64);
  const auto e = expected.detach().to(torch::kCPU, torch::kFloat64);
  return ((a - e).norm() / e.norm()).item<double>();
}

// max|actual − expected| / max|expected| in float64: the worst element against the tensor's own scale.
inline double relative_max_error(const torch::Tensor& actual, const torch::Tensor& expected) {
  const auto a = actual.detach().to(torch::kCPU, torch::kFloat64);
  const auto e = expected.detach().to(torch::kCPU, torch::kFloat64);
  return (a - e).abs().max().item<double>() / std::max(e.abs().max().item<double>(), 1e-30);
}

}  // namespace zest::testing
