// FlatUnit buffers and views (see flat_unit.h).
#include "engine/flat_unit.h"

#include "core/check.h"

#include <utility>

namespace zest {

FlatUnit::FlatUnit(UnitLayout layout, std::vector<torch::Tensor> params, ElementSpan owned,
                   const ShardingPolicy& policy, torch::Dtype compute_dtype)
    : layout_(std::move(layout)), params_(std::move(params)), owned_(owned), compute_dtype_(compute_dtype) {
  ZEST_CHECK(params_.size() == layout_.slots.size(), "unit ", layout_.name, ": ", params_.size(),
             " parameters for ", layout_.slots.size(), " slots");
  const auto options = params_.empty() ? torch::TensorOptions() : params_.front().options();
  param_flat_ = torch::zeros({layout_.padded_numel}, options.dtype(compute_dtype_));
  initial_fp32_ = full_values_fp32();  // read before the views replace the (possibly fp32) originals
  set_values(initial_fp32_);
  if (!policy.shard_grads) {
    grad_flat_ = torch::zeros({layout_.padded_numel}, options.dtype(compute_dtype_));
    for (size_t i = 0; i < params_.size(); ++i) {
      const auto& slot = layout_.slots[i];
      params_[i].mutable_grad() = grad_flat_.narrow(0, slot.offset, slot.numel).view(slot.shape);
    }
  }
}

torch::Tensor FlatUnit::take_initial_values() {
  ZEST_CHECK(initial_fp32_.defined(), "unit ", layout_.name, ": initial values already taken");
  return std::exchange(initial_fp32_, torch::Tensor());
}

torch::Tensor FlatUnit::full_values_fp32() const {
  torch::NoGradGuard no_grad;
  auto full = torch::zeros({layout_.padded_numel}, param_flat_.options().dtype(torch::kFloat32));
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto& slot = layout_.slots[i];
    full.narrow(0, slot.offset, slot.numel).copy_(params_[i].reshape({-1}));
  }
  return full;
}

void FlatUnit::set_values(const torch::Tensor& full_fp32) {
  ZEST_CHECK(full_fp32.numel() == layout_.padded_numel, "unit ", layout_.name, ": ",
             full_fp32.numel(), " values for a buffer of ", layout_.padded_numel);
  torch::NoGradGuard no_grad;
  param_flat_.copy_(full_fp32);
  attach_views();
}

void FlatUnit::attach_views() {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto& slot = layout_.slots[i];
    auto view = param_flat_.narrow(0, slot.offset, slot.numel).view(slot.shape);
    if (params_[i].data_ptr() != view.data_ptr() || params_[i].scalar_type() != compute_dtype_) {
      params_[i].set_data(view);
    }
  }
}

torch::Tensor FlatUnit::take_grads_into_bucket() {
  torch::NoGradGuard no_grad;
  auto bucket = torch::zeros({layout_.padded_numel}, param_flat_.options());
  for (size_t i = 0; i < params_.size(); ++i) {
    auto& grad = params_[i].mutable_grad();
    if (!grad.defined()) continue;
    const auto& slot = layout_.slots[i];
    bucket.narrow(0, slot.offset, slot.numel).copy_(grad.reshape({-1}));
    grad = torch::Tensor();
  }
  return bucket;
}

void FlatUnit::zero_grads() {
  torch::NoGradGuard no_grad;
  if (grad_flat_.defined()) {
    grad_flat_.zero_();
    return;
  }
  for (auto& p : params_) p.mutable_grad() = torch::Tensor();
}

}  // namespace zest
