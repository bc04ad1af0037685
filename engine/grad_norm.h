// Per-parameter sums of squares of the rank's gradient slices, written to a device tensor without a host
// sync: the input of the global-norm clip and the overflow check (one allreduce of [parameters] doubles,
// which also names the first parameter with a non-finite gradient).
#pragma once

#include <torch/torch.h>

#include <vector>

namespace zest {

// out[i] = Σ pieces[i]² as float64 (non-finite when pieces[i] holds inf/nan). out: float64 [pieces.size()] on
// the pieces' device.
void sums_of_squares(const std::vector<torch::Tensor>& pieces, const torch::Tensor& out);

}  // namespace zest
