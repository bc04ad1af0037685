// Bucket verbs (see bucket.h).
#include "engine/bucket.h"

#include "comm/collective_timeout.h"
#include "core/check.h"
#include "engine/storage.h"

namespace zest {

Bucket::Bucket(size_t first, size_t last, const BucketEnv& env) : first_(first), last_(last), env_(env) {
  ZEST_CHECK(first <= last && last < env.units->size(), "bucket [", first, ", ", last, "] outside ",
             env.units->size(), " units");
  const ShardingPolicy& policy = *env_.policy;
  FlatBuffers& buffers = *env_.buffers;
  if (!policy.gathers_per_unit()) {
    for (size_t u : unit_indices()) unit(u).point_params_at(buffers.param_full(u));
    return;
  }
  // Stage 3: one buffer for the bucket's units; the parameters become views of it while it is allocated,
  // then its memory goes until the first unshard.
  param_buffer_ = torch::zeros({padded_numel()},
                               torch::TensorOptions().dtype(buffers.dtypes().compute).device(buffers.device()));
  const std::vector<torch::Tensor> parts = unit_parts(param_buffer_);
  for (size_t u : unit_indices()) unit(u).point_params_at(parts[u - first_]);
  free_storage(param_buffer_);
  residency_ = Residency::sharded;
}

std::string Bucket::describe() const {
  std::string names = unit(first_).name();
  if (last_ > first_) names += ".." + unit(last_).name();
  return "units " + names;
}

std::vector<size_t> Bucket::unit_indices() const {
  std::vector<size_t> indices;
  for (size_t u = first_; u <= last_; ++u) indices.push_back(u);
  return indices;
}

int64_t Bucket::padded_numel() const {
  int64_t n = 0;
  for (size_t u = first_; u <= last_; ++u) n += unit(u).padded_numel();
  return n;
}

std::vector<torch::Tensor> Bucket::unit_parts(const torch::Tensor& bucket_buffer) const {
  std::vector<torch::Tensor> parts;
  int64_t offset = 0;
  for (size_t u = first_; u <= last_; ++u) {
    parts.push_back(bucket_buffer.narrow(0, offset, unit(u).padded_numel()));
    offset += unit(u).padded_numel();
  }
  return parts;
}

// ---- gradients: the walk's second stop (docs/design.md) ---------------------------------------------

void Bucket::point_grads_at(size_t u, const torch::Tensor& grad_flat) const {
  const UnitLayout& layout = unit(u).layout();
  ZEST_CHECK(grad_flat.numel() == layout.padded_numel, "unit ", layout.name, ": a gradient buffer of ",
             grad_flat.numel(), " elements for ", layout.padded_numel);
  const std::vector<torch::Tensor>& params = unit(u).params();
  for (size_t i = 0; i < params.size(); ++i) {
    const ParamSlot& slot = layout.slots[i];
    params[i].mutable_grad() = grad_flat.narrow(0, slot.offset, slot.numel).view(slot.shape);
  }
}

void Bucket::drop_grads(size_t u) const {
  for (const torch::Tensor& param : unit(u).params()) param.mutable_grad() = torch::Tensor();
}

void Bucket::ensure_grads() {
  torch::NoGradGuard no_grad;
  FlatBuffers& buffers = *env_.buffers;
  if (!env_.policy->has_transient_grads()) {
    for (size_t u : unit_indices()) {
      if (buffers.has_grads(u)) continue;
      buffers.allocate_grads(u);
      point_grads_at(u, buffers.grad_full(u));
    }
    return;
  }
  if (grad_buffer_.defined()) return;
  grad_buffer_ = torch::zeros({padded_numel()},
                              torch::TensorOptions().dtype(buffers.dtypes().reduce).device(buffers.device()));
  grad_bytes_in_flight_ = static_cast<int64_t>(grad_buffer_.nbytes());
  if (env_.transient_grads) env_.transient_grads->add(grad_bytes_in_flight_);
  const std::vector<torch::Tensor> parts = unit_parts(grad_buffer_);
  for (size_t u : unit_indices()) point_grads_at(u, parts[u - first_]);
}

void Bucket::release_grads() {
  if (env_.policy->has_transient_grads()) return;  // released at their reduction already
  for (size_t u : unit_indices()) {
    drop_grads(u);
    env_.buffers->release_grads(u);
  }
}

void Bucket::reduce_grads(bool accumulate) {
  ZEST_CHECK(reduce_work_ == nullptr, describe(), ": gradients reduced twice without a wait");
  const CollectiveLabel label(describe());  // a collective that times out names the bucket's units
  torch::NoGradGuard no_grad;
  FlatBuffers& buffers = *env_.buffers;
  ensure_grads();  // every rank takes part even if no gradient reached these units here (zeros then)
  std::vector<torch::Tensor> inputs, outputs;
  switch (env_.policy->grad_reduction()) {
    case GradReduction::allreduce:
      for (size_t u : unit_indices()) inputs.push_back(buffers.grad_full(u));
      reduce_work_ = env_.comm->allreduce_many(inputs, ReduceOp::sum);
      return;
    case GradReduction::reduce_scatter:  // in place: each unit's own slice of its full buffer
      for (size_t u : unit_indices()) {
        inputs.push_back(buffers.grad_full(u));
        outputs.push_back(buffers.grad_shard(u));
      }
      reduce_work_ = env_.comm->reduce_scatter_many(inputs, outputs, ReduceOp::sum);
      return;
    case GradReduction::reduce_scatter_to_shard: {  // from the transient buffer ensure_grads made
      inputs = unit_parts(grad_buffer_);
      for (size_t u : unit_indices()) {
        outputs.push_back(buffers.grad_shard(u));
        drop_grads(u);
      }
      reduce_work_ = env_.comm->reduce_scatter_many(inputs, outputs, ReduceOp::sum, accumulate);
      // The handle holds the buffer until the reduction is waited for (a few buckets later, or at step()),
      // after which its memory is free again in the compute stream's order.
      grad_buffer_ = torch::Tensor();
      return;
    }
  }
}

void Bucket::order_reduce_before_current_stream() {
  if (reduce_work_) reduce_work_->order_before_current_stream();
}

void Bucket::wait_reduce() {
  if (!reduce_work_) return;
  reduce_work_->wait();
  reduce_work_.reset();
  if (env_.transient_grads) env_.transient_grads->remove(grad_bytes_in_flight_);
  grad_bytes_in_flight_ = 0;
}

void Bucket::unshard() {
  if (residency_ != Residency::sharded) return;
  ZEST_CHECK(gather_work_ == nullptr, describe(), ": parameters gathered twice without a wait");
  const CollectiveLabel label(describe());
  torch::NoGradGuard no_grad;
  FlatBuffers& buffers = *env_.buffers;
  std::vector<torch::Tensor> inputs, outputs;
  if (param_buffer_.defined()) allocate_storage(param_buffer_, param_buffer_.numel() * param_buffer_.element_size());
  for (size_t u : unit_indices()) {
    const torch::Tensor gathered = unit(u).param_flat();
    inputs.push_back(buffers.gather_input(u, gathered));
    outputs.push_back(gathered);
  }
  gather_work_ = env_.comm->allgather_many(inputs, outputs);
  residency_ = Residency::gathering;
}

void Bucket::wait_unshard() {
  if (!gather_work_) return;
  gather_work_->wait();
  gather_work_.reset();
  residency_ = Residency::gathered;
}

void Bucket::reshard() {
  if (!env_.policy->gathers_per_unit() || residency_ == Residency::sharded) return;
  wait_unshard();  // a gather still in flight writes into the memory about to go
  free_storage(param_buffer_);
  residency_ = Residency::sharded;
}

void Bucket::slices_updated() {
  if (env_.policy->gathers_per_unit()) {
    reshard();
  } else if (!env_.policy->owns_whole_units()) {
    residency_ = Residency::sharded;
  }
}

int64_t Bucket::gathered_bytes() const {
  return param_buffer_.defined() ? static_cast<int64_t>(param_buffer_.storage().nbytes()) : 0;
}

}  // namespace zest
