// StagingRing (see staging_ring.h): page-locked slots and the copies through them.
#include "optim/staging_ring.h"

#include "core/check.h"
#include "optim/pinned_memory.h"

namespace zest {

StagingRing::StagingRing(int slots, int64_t slot_numel, torch::Dtype grad_dtype, torch::Dtype param_dtype,
                         const torch::Device& device)
    : slot_numel_(slot_numel),
      grads_(zeroed_host_tensor(slots * slot_numel, grad_dtype, device)),
      params_(zeroed_host_tensor(slots * slot_numel, param_dtype, device)),
      downloads_(device),
      uploads_(device),
      uploaded_(static_cast<size_t>(slots)) {
  ZEST_CHECK(slots >= 1 && slot_numel >= 1, "staging ring: ", slots, " slots of ", slot_numel, " elements");
}

const void* StagingRing::grad_at(int s, int64_t offset) const {
  return static_cast<const char*>(grads_.data_ptr()) + (s * slot_numel_ + offset) * grads_.element_size();
}

void* StagingRing::param_at(int s, int64_t offset) const {
  return static_cast<char*>(params_.data_ptr()) + (s * slot_numel_ + offset) * params_.element_size();
}

SideStream::Mark StagingRing::download(int s, const torch::Tensor& device_grad) {
  ZEST_CHECK(device_grad.numel() <= slot_numel_, "staging ring: a piece of ", device_grad.numel(),
             " elements does not fit a slot of ", slot_numel_);
  downloads_.run([&] { grad(s, device_grad.numel()).copy_(device_grad, /*non_blocking=*/true); });
  return downloads_.mark();
}

void StagingRing::upload(int s, const torch::Tensor& device_param) {
  const torch::Tensor values = param(s, device_param.numel());
  uploads_.run([&] { device_param.copy_(values, /*non_blocking=*/true); });
  uploaded_[static_cast<size_t>(s)] = uploads_.mark();
}

void StagingRing::join() {
  downloads_.join();
  uploads_.join();
}

}  // namespace zest
