// Freeing and re-allocating a tensor's storage in place (stage 3): the StorageImpl object stays, so every
// view of it — the parameters, and the copies autograd saved for backward — sees the memory again once
// it is re-allocated and refilled. Only the bytes come and go.
#pragma once

#include <torch/torch.h>

namespace zest {

inline bool is_storage_allocated(const torch::Tensor& t) { return t.storage().nbytes() > 0; }

// Releases the memory behind `t` (to the caching allocator on CUDA). Views stay valid objects but must
// not be read until allocate_storage().
inline void free_storage(const torch::Tensor& t) {
  c10::StorageImpl* storage = t.storage().unsafeGetStorageImpl();
  if (storage->nbytes() == 0) return;
  storage->set_data_ptr_noswap(at::DataPtr(nullptr, storage->device()));
  storage->set_nbytes(0);
}

// Gives `t`'s storage `nbytes` of fresh (uninitialised) memory from the storage's own allocator.
inline void allocate_storage(const torch::Tensor& t, size_t nbytes) {
  c10::StorageImpl* storage = t.storage().unsafeGetStorageImpl();
  if (storage->nbytes() == nbytes) return;
  storage->set_data_ptr_noswap(storage->allocator()->allocate(nbytes));
  storage->set_nbytes(nbytes);
}

}  // namespace zest
