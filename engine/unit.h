// Unit: one declared unit's parameters as views into a flat compute-dtype buffer, and the part of it this
// rank owns. Buckets (bucket.h) run the collectives and own the gradients' views; the unit only points its
// parameters at the buffer it is given.
#pragma once

#include "engine/unit_layout.h"

#include <torch/torch.h>

#include <string>
#include <vector>

namespace zest {

class Unit {
 public:
  // `params`: the unit's parameter tensors in slot order. `owned`: the part of the unit's padded buffer
  // this rank updates (ShardingPolicy::owned: its slice, or the whole buffer at stage 0). `flat_begin`:
  // where that part starts in the rank's flat shards (master, gradient shard, optimizer state).
  Unit(UnitLayout layout, std::vector<torch::Tensor> params, ElementSpan owned, int64_t flat_begin);

  const UnitLayout& layout() const { return layout_; }
  const std::string& name() const { return layout_.name; }
  const std::vector<torch::Tensor>& params() const { return params_; }
  ElementSpan owned() const { return owned_; }
  ElementSpan in_flat() const { return in_flat_; }  // the owned part's place in the rank's flat shards
  int64_t padded_numel() const { return layout_.padded_numel; }

  // The parameters' current values as fp32 [padded_numel] on the CPU (construction: the model's own).
  torch::Tensor values_fp32_cpu() const;

  // Points every parameter at its slot of `param_flat` ([padded_numel], the compute dtype, any device).
  // Views are created while the buffer is allocated; stage 3 later frees and re-allocates the storage
  // under them (storage.h), so parameters and saved activations keep referring to it.
  void point_params_at(const torch::Tensor& param_flat);
  const torch::Tensor& param_flat() const { return param_flat_; }
  // True while every parameter still is a view of the engine's buffer (a model moved by .to() is not).
  bool params_are_engine_views() const;

  // Units (indices) whose forward also uses one of this unit's parameters (tied parameters declared
  // under another unit's prefix): this unit's gradient is complete only once their backward is done.
  const std::vector<size_t>& tied_users() const { return tied_users_; }
  void add_tied_user(size_t unit_idx);

 private:
  UnitLayout layout_;
  std::vector<torch::Tensor> params_;
  ElementSpan owned_;
  ElementSpan in_flat_;
  torch::Tensor param_flat_;  // [padded_numel] compute dtype
  std::vector<size_t> tied_users_;
};

}  // namespace zest
