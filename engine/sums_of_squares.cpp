// Sums of squares of gradient pieces on their device (see sums_of_squares.h).
#include "engine/sums_of_squares.h"

#include "core/check.h"
#include "core/compat.h"

namespace zest {

void sums_of_squares(const std::vector<torch::Tensor>& pieces, const torch::Tensor& out) {
  ZEST_CHECK(out.scalar_type() == torch::kFloat64 && out.numel() == static_cast<int64_t>(pieces.size()),
             "sums_of_squares: out must be float64 [", pieces.size(), "]");
  torch::NoGradGuard no_grad;
  if (pieces.empty()) return;
  if (out.is_cuda()) {
    const auto norms = compat::foreach_norm_fp32(pieces);  // fused multi-tensor launches
    out.copy_(torch::stack(norms).to(torch::kFloat64).square());
    return;
  }
  auto* sums = out.data_ptr<double>();
  for (size_t i = 0; i < pieces.size(); ++i) {
    sums[i] = pieces[i].numel() == 0 ? 0.0 : pieces[i].to(torch::kFloat32).square().sum(torch::kFloat64).item<double>();
  }
}

}  // namespace zest
