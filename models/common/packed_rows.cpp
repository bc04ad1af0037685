// gather_rows and scatter_rows (see packed_rows.h) as autograd functions, each the other's backward.
#include "models/common/packed_rows.h"

#include "core/check.h"

#include <torch/csrc/autograd/custom_function.h>

namespace zest {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

torch::Tensor scattered(const torch::Tensor& x, const torch::Tensor& rows, int64_t total) {
  auto out = torch::zeros({total, x.size(1)}, x.options());
  return out.index_copy_(0, rows, x);
}

struct GatherRows : torch::autograd::Function<GatherRows> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& rows) {
    ctx->save_for_backward({rows});
    ctx->saved_data["total"] = x.size(0);
    return x.index_select(0, rows);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto rows = ctx->get_saved_variables()[0];
    return {scattered(grads[0], rows, ctx->saved_data["total"].toInt()), {}};
  }
};

struct ScatterRows : torch::autograd::Function<ScatterRows> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& rows,
                               int64_t total) {
    ctx->save_for_backward({rows});
    return scattered(x, rows, total);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto rows = ctx->get_saved_variables()[0];
    return {grads[0].index_select(0, rows), {}, {}};
  }
};

void check_rows(const torch::Tensor& x, const torch::Tensor& rows, const char* what) {
  ZEST_CHECK(x.dim() == 2 && rows.dim() == 1 && rows.scalar_type() == torch::kLong && rows.device() == x.device(),
             what, ": x must be [R, D] and rows int64 [N] on its device, got ", x.sizes(), " and ", rows.sizes(), " ",
             rows.scalar_type());
}

}  // namespace

torch::Tensor gather_rows(const torch::Tensor& x, const torch::Tensor& rows) {
  check_rows(x, rows, "gather_rows");
  return GatherRows::apply(x, rows);
}

torch::Tensor scatter_rows(const torch::Tensor& x, const torch::Tensor& rows, int64_t total) {
  check_rows(x, rows, "scatter_rows");
  ZEST_CHECK(rows.size(0) == x.size(0), "scatter_rows: ", rows.size(0), " rows for ", x.size(0), " inputs");
  return ScatterRows::apply(x, rows, total);
}

}  // namespace zest
