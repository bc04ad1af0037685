// `zest models parity`: a model port checked against a golden file of its reference implementation
// (param.*, input.*, output.*, grad.* tensors; scripts/golden/): the model built from a configuration, the
// golden parameters loaded, input.* run forward, loss = mean(out²), backward, and the output, the loss and
// every gradient compared within their tolerances. Each comparison and a one-line verdict are printed.
#pragma once

#include <string>

namespace zest {

// Gradients are compared per tensor relative to the tensor's own scale (max |golden|): gradient
// magnitudes span 1e-1 to 5e-6, so an absolute tolerance sized for the large ones would pass a small
// gradient that is zero or wrong. The float32 ports reach max|Δ| ≤ 1.2e-5 · max|golden|; atol covers
// gradients that are mathematically zero (float32 noise of ~1e-11).
struct ParityOptions {
  std::string family;
  std::string config_path;
  std::string golden_path;
  double atol_out = 1e-5;
  double rtol_grad = 1e-4;
  double atol_grad = 1e-9;
};

// Runs the check and prints every comparison, the worst gradient and the one-line summary last; returns
// whether it passed.
bool check_parity(const ParityOptions& opt);

}  // namespace zest
