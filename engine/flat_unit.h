// FlatUnit: one unit's flat compute-dtype parameter buffer (the parameters are views into it), its
// gradient storage, and the slice this rank owns. The engine drives its verbs; nothing else touches
// the buffers.
#pragma once

#include "engine/sharding_policy.h"
#include "engine/unit_layout.h"

#include <torch/torch.h>

#include <vector>

namespace zest {

class FlatUnit {
 public:
  // `params` are the unit's parameter tensors in slot order; their current values become the initial
  // contents. `owned` is the span this rank updates (the whole buffer at stage 0).
  FlatUnit(UnitLayout layout, std::vector<torch::Tensor> params, ElementSpan owned,
           const ShardingPolicy& policy, torch::Dtype compute_dtype);

  const UnitLayout& layout() const { return layout_; }
  const std::string& name() const { return layout_.name; }
  ElementSpan owned() const { return owned_; }
  const std::vector<torch::Tensor>& params() const { return params_; }

  // The parameters' values at construction as fp32 [padded_numel], read before the compute-dtype views
  // replaced them (so fp32 masters keep full precision). Can be taken once.
  torch::Tensor take_initial_values();
  // Current parameter values as fp32 [padded_numel].
  torch::Tensor full_values_fp32() const;
  // Replaces the buffer contents (compute dtype conversion included) and points the parameters at it.
  void set_values(const torch::Tensor& full_fp32);

  torch::Tensor param_flat() const { return param_flat_; }  // [padded_numel] compute dtype
  torch::Tensor param_owned() const { return param_flat_.narrow(0, owned_.begin, owned_.numel); }

  // Stages 0/1: persistent gradient buffer, the parameters' .grad are views into it.
  bool has_grad_flat() const { return grad_flat_.defined(); }
  torch::Tensor grad_flat() const { return grad_flat_; }  // [padded_numel] compute dtype
  // Stage 2: copies the parameters' autograd-owned .grad into one padded bucket (zeros for
  // parameters that got none) and releases them, so the full gradient lives only until reduced.
  torch::Tensor take_grads_into_bucket();
  void zero_grads();

 private:
  void attach_views();

  UnitLayout layout_;
  std::vector<torch::Tensor> params_;
  ElementSpan owned_;
  torch::Dtype compute_dtype_;
  torch::Tensor param_flat_;  // [padded_numel] compute dtype
  torch::Tensor initial_fp32_;  // [padded_numel] fp32, until taken
  torch::Tensor grad_flat_;   // [padded_numel] compute dtype (stages 0/1 only)
};

}  // namespace zest
