// The rank's flat tensors (see flat_buffers.h).
#include "engine/flat_buffers.h"

#include "core/check.h"
#include "engine/storage.h"

namespace zest {
namespace {

// A unit's owned part of a flat shard tensor.
torch::Tensor in_flat(const torch::Tensor& flat, const Unit& unit) {
  return flat.narrow(0, unit.in_flat().begin, unit.in_flat().numel);
}

// A span of one unit's [padded_numel] tensor.
torch::Tensor in_unit(const torch::Tensor& unit_tensor, ElementSpan span) {
  return unit_tensor.narrow(0, span.begin, span.numel);
}

}  // namespace

FlatBuffers::FlatBuffers(const std::vector<Unit>& units, const ShardingPolicy& policy, FlatDtypes dtypes,
                         torch::Device device, bool master_on_host)
    : units_(units), dtypes_(dtypes), device_(device) {
  int64_t full_numel = 0, shard_numel = 0;
  for (const Unit& unit : units) {
    full_offsets_.push_back(full_numel);
    full_numel += unit.padded_numel();
    shard_numel += unit.owned().numel;
  }
  const auto on_device = torch::TensorOptions().device(device);
  // An offloaded master never crosses PCIe in a step (the optimizer's gradient and parameter copies do):
  // ordinary host memory.
  master_ = torch::zeros({shard_numel}, (master_on_host ? torch::TensorOptions() : on_device).dtype(torch::kFloat32));
  // Stages 1–2 update their slice inside the full buffer and allgather in place; stage 3 keeps the
  // parameter shard as a tensor of its own only with the master on the host (ShardingPolicy::keeps_param_shard).
  if (policy.gathers_per_unit()) {
    if (policy.keeps_param_shard(master_on_host)) param_shard_ = torch::zeros({shard_numel}, on_device.dtype(dtypes.compute));
  } else {
    param_full_ = torch::zeros({full_numel}, on_device.dtype(dtypes.compute));
  }
  if (policy.has_transient_grads()) {
    grad_shard_ = torch::zeros({shard_numel}, on_device.dtype(dtypes.reduce));
  } else {
    // With memory until the engine has made its views of them (a view of freed storage cannot be made);
    // the engine then releases it (reset_grads) before it allocates the optimizer state.
    for (const Unit& unit : units) {
      grad_full_.push_back(torch::zeros({unit.padded_numel()}, on_device.dtype(dtypes.reduce)));
    }
  }
}

torch::Tensor FlatBuffers::param_full(size_t u) const {
  ZEST_CHECK(param_full_.defined(), "param_full: parameters are sharded at rest (stage 3)");
  return param_full_.narrow(0, full_offsets_[u], units_[u].padded_numel());
}

torch::Tensor FlatBuffers::param_shard(size_t u) const {
  const Unit& unit = units_[u];
  if (param_shard_.defined()) return in_flat(param_shard_, unit);
  return param_full_.defined() ? in_unit(param_full(u), unit.owned()) : torch::Tensor();
}

torch::Tensor FlatBuffers::gather_input(size_t u, const torch::Tensor& gathered) const {
  const torch::Tensor kept = param_shard(u);
  if (kept.defined()) return kept;
  const torch::Tensor slot = in_unit(gathered, units_[u].owned());
  slot.copy_(master(u));  // the compute dtype's rounding of the master, as the optimizer would have written it
  return slot;
}

torch::Tensor FlatBuffers::grad_full(size_t u) const {
  ZEST_CHECK(has_per_step_grads(), "grad_full: gradients are sharded (stage >= 2)");
  return grad_full_[u];
}

bool FlatBuffers::has_grads(size_t u) const { return has_per_step_grads() && is_storage_allocated(grad_full_[u]); }

void FlatBuffers::allocate_grads(size_t u) {
  const torch::Tensor& grad = grad_full(u);
  allocate_storage(grad, static_cast<size_t>(grad.numel()) * grad.element_size());
  grad.zero_();
}

torch::Tensor FlatBuffers::grad_shard(size_t u) const {
  const Unit& unit = units_[u];
  return grad_shard_.defined() ? in_flat(grad_shard_, unit) : in_unit(grad_full(u), unit.owned());
}

torch::Tensor FlatBuffers::master(size_t u) const { return in_flat(master_, units_[u]); }

void FlatBuffers::load_unit(size_t u, const torch::Tensor& values) {
  const ElementSpan owned = units_[u].owned();
  master(u).copy_(in_unit(values, owned));
  if (param_full_.defined()) {
    param_full(u).copy_(values);
  } else if (param_shard_.defined()) {
    param_shard(u).copy_(in_unit(values, owned));
  }  // else: gathers cast the master
}

void FlatBuffers::release_grads(size_t u) {
  if (has_per_step_grads()) free_storage(grad_full_[u]);
}

void FlatBuffers::reset_grads() {
  for (const torch::Tensor& grad : grad_full_) free_storage(grad);
  if (grad_shard_.defined()) grad_shard_.zero_();
}

int64_t FlatBuffers::param_bytes() const {
  return (param_full_.defined() ? param_full_.nbytes() : 0) + (param_shard_.defined() ? param_shard_.nbytes() : 0);
}

int64_t FlatBuffers::grad_bytes() const {
  int64_t bytes = grad_shard_.defined() ? static_cast<int64_t>(grad_shard_.nbytes()) : 0;
  for (const torch::Tensor& grad : grad_full_) bytes += grad.numel() * static_cast<int64_t>(grad.element_size());
  return bytes;
}

}  // namespace zest
