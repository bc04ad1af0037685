// sums_of_squares: each gradient piece's sum of squares as float64, on the pieces' device without a host
// sync — the input of the global-norm clip, the non-finite check and the reported gradient norm.
#pragma once

#include <torch/torch.h>

#include <vector>

namespace zest {

// out[i] = Σ pieces[i]² (non-finite when pieces[i] holds inf/nan); out: float64 [pieces]. One fused
// multi-tensor norm kernel on CUDA; on the CPU a per-piece float64 reduction (exact enough to compare with
// LibTorch's clip_grad_norm_ in the tests).
void sums_of_squares(const std::vector<torch::Tensor>& pieces, const torch::Tensor& out);

}  // namespace zest
