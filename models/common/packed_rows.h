// Rows moved between a padded layout and packed rows (only the rows that count, one after another), with
// gradients that go back the same way: gathers and scatters of distinct rows, so that neither direction
// needs atomics or a zero-filled sum.
#pragma once

#include <torch/torch.h>

namespace zest {

// out[i] = x[rows[i]] for x [R, D] and int64 rows [N] of distinct values; x's gradient is zero except at
// `rows` (written by index_copy).
torch::Tensor gather_rows(const torch::Tensor& x, const torch::Tensor& rows);

// [total, D] zeros with out[rows[i]] = x[i] for x [N, D] and int64 rows [N] of distinct values in [0, total);
// x's gradient is the output's gradient at `rows`.
torch::Tensor scatter_rows(const torch::Tensor& x, const torch::Tensor& rows, int64_t total);

}  // namespace zest
