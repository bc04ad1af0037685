// StagingRing: the few page-locked host buffers through which the offloaded optimizer streams each
// step's gradient shard down to the host and the updated parameters back up, piece by piece, so the
// host never holds a copy of the whole shard. Downloads and uploads run on two side streams (both PCIe
// directions busy at once); a slot's parameter half is reused once its last upload has left.
#pragma once

#include "optim/side_stream.h"

#include <torch/torch.h>

#include <algorithm>
#include <vector>

namespace zest {

constexpr int kStagingSlots = 4;  // one piece going down, one being updated, one going up, one spare

// Elements per slot when the ring may take `staging_bytes` (all slots together, a gradient and a
// parameter element each `bytes_per_element`): at least 1, and no more than the longest piece needs.
inline int64_t staging_slot_numel(int64_t staging_bytes, int64_t bytes_per_element, int64_t longest_piece) {
  return std::clamp<int64_t>(staging_bytes / (kStagingSlots * bytes_per_element), 1, std::max<int64_t>(1, longest_piece));
}

class StagingRing {
 public:
  // `slots` buffers of `slot_numel` gradient elements (grad_dtype) and as many parameter elements
  // (param_dtype), page-locked when `device` is a GPU.
  StagingRing(int slots, int64_t slot_numel, torch::Dtype grad_dtype, torch::Dtype param_dtype,
              const torch::Device& device);

  int slots() const { return static_cast<int>(uploaded_.size()); }
  int64_t slot_numel() const { return slot_numel_; }
  int64_t bytes() const { return grads_.nbytes() + params_.nbytes(); }
  // Slot `s`'s halves, `numel` elements from the start.
  torch::Tensor grad(int s, int64_t numel) const { return grads_.narrow(0, s * slot_numel_, numel); }
  torch::Tensor param(int s, int64_t numel) const { return params_.narrow(0, s * slot_numel_, numel); }
  // Element `offset` of slot `s`'s halves, for the host update's inner loops.
  const void* grad_at(int s, int64_t offset) const;
  void* param_at(int s, int64_t offset) const;

  // Queues the copy of `device_grad` into slot `s`'s gradient half, after the work queued on the current
  // stream so far; the mark is reached when the host may read it.
  SideStream::Mark download(int s, const torch::Tensor& device_grad);
  // Queues the copy of slot `s`'s parameter half into `device_param`.
  void upload(int s, const torch::Tensor& device_param);
  // True when slot `s`'s last upload has left, so the host may write its parameter half again.
  bool is_param_free(int s) const { return uploaded_[static_cast<size_t>(s)].is_reached(); }
  // The current stream waits (on the device) for every copy queued so far.
  void join();

 private:
  int64_t slot_numel_;
  torch::Tensor grads_;   // [slots · slot_numel] grad_dtype
  torch::Tensor params_;  // [slots · slot_numel] param_dtype
  SideStream downloads_;
  SideStream uploads_;
  std::vector<SideStream::Mark> uploaded_;  // per slot: its last upload
};

}  // namespace zest
