// Unit views (see unit.h).
#include "engine/unit.h"

#include "core/check.h"

#include <algorithm>
#include <utility>

namespace zest {

Unit::Unit(UnitLayout layout, std::vector<torch::Tensor> params, ElementSpan owned, int64_t flat_begin)
    : layout_(std::move(layout)), params_(std::move(params)), owned_(owned), in_flat_{flat_begin, owned.numel} {
  ZEST_CHECK(params_.size() == layout_.slots.size(), "unit ", layout_.name, ": ", params_.size(),
             " parameters for ", layout_.slots.size(), " slots");
}

torch::Tensor Unit::values_fp32_cpu() const {
  torch::NoGradGuard no_grad;
  auto full = torch::zeros({layout_.padded_numel}, torch::kFloat32);
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto& slot = layout_.slots[i];
    full.narrow(0, slot.offset, slot.numel).copy_(params_[i].reshape({-1}));
  }
  return full;
}

void Unit::point_params_at(const torch::Tensor& param_flat) {
  ZEST_CHECK(param_flat.numel() == layout_.padded_numel, "unit ", layout_.name, ": a buffer of ",
             param_flat.numel(), " elements for ", layout_.padded_numel);
  torch::NoGradGuard no_grad;
  param_flat_ = param_flat;
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto& slot = layout_.slots[i];
    params_[i].set_data(param_flat.narrow(0, slot.offset, slot.numel).view(slot.shape));
  }
}

bool Unit::params_are_engine_views() const {
  const void* storage = param_flat_.defined() ? param_flat_.storage().unsafeGetStorageImpl() : nullptr;
  return std::all_of(params_.begin(), params_.end(), [storage](const torch::Tensor& p) {
    return p.unsafeGetTensorImpl()->storage().unsafeGetStorageImpl() == storage;
  });
}

void Unit::add_tied_user(size_t unit_idx) {
  if (std::find(tied_users_.begin(), tied_users_.end(), unit_idx) == tied_users_.end()) {
    tied_users_.push_back(unit_idx);
  }
}

}  // namespace zest
