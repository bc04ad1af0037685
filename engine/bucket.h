// Bucket: a run of consecutive units whose collectives go out together (one group of NCCL calls, one
// packed MPI call) — FSDP2's parameter group. It holds its parameters' residency, its units' gradients from
// the first one's arrival to their reduction (the parameters' .grad views, the gradient walk's second stop:
// docs/design.md), and owns the verbs the stages are made of:
//   gradients:  ensure_grads → reduce_grads → (step) wait_reduce → release_grads
//   parameters: unshard → wait_unshard, reshard, and slices_updated after the optimizer wrote the slices
// What each verb does is the ShardingPolicy's choice (a verb a stage does not need is a no-op); the
// GradReducer, the engine and ParamResidency only order the verbs. A bucket of one unit is just a bucket.
#pragma once

#include "comm/communicator.h"
#include "engine/flat_buffers.h"
#include "engine/sharding_policy.h"
#include "engine/unit.h"

#include <torch/torch.h>

#include <algorithm>
#include <string>
#include <vector>

namespace zest {

// Bytes of transient gradient buffers (stages 2–3) from their allocation until their reduction is
// waited for: what stage 2 holds instead of stage 1's full gradients (which live the whole backward).
struct TransientBytes {
  int64_t current = 0;
  int64_t peak = 0;
  void add(int64_t bytes) { peak = std::max(peak, current += bytes); }
  void remove(int64_t bytes) { current -= bytes; }
};

// What every bucket works with; owned by the engine, outlives its buckets.
struct BucketEnv {
  Communicator* comm = nullptr;
  const ShardingPolicy* policy = nullptr;
  std::vector<Unit>* units = nullptr;
  FlatBuffers* buffers = nullptr;
  TransientBytes* transient_grads = nullptr;
};

// Where a bucket's full parameters stand on this rank.
enum class Residency {
  sharded,    // only the rank's slices are current: stage 3 at rest (the memory is freed), or stages 1–2
              // between the optimizer's update and the allgather
  gathering,  // an allgather into the full buffer is in flight
  gathered,   // the full parameters are readable (always, at stage 0)
};

class Bucket {
 public:
  // Points the units' parameters at the buffer they live in at rest (the full buffer; stage 3: the bucket's
  // own, freed until the first unshard).
  Bucket(size_t first, size_t last, const BucketEnv& env);

  size_t first() const { return first_; }
  size_t last() const { return last_; }
  bool contains(size_t unit_idx) const { return unit_idx >= first_ && unit_idx <= last_; }
  std::string describe() const;  // "bucket 3 (blocks.4..blocks.6)"

  // ---- gradients ----
  // Gives the bucket's units zeroed reduce-dtype gradients (their .grad views) where they have none yet:
  // stages 2–3 a transient buffer for the bucket, until its reduction; stages 0–1 (and 2 on one rank)
  // each unit's per-step full gradients (FlatBuffers), until release_grads. Called when a unit's backward
  // starts or a gradient arrives, so fused kernels and autograd always find their slots.
  void ensure_grads();
  // After the optimizer step: the units' .grad undefined and their per-step gradient memory released.
  void release_grads();
  // Launches the bucket's gradient collective (the policy's GradReduction). accumulate: add into the
  // gradient shard (a later micro-step of the same step) instead of overwriting it.
  void reduce_grads(bool accumulate);
  // Orders the launched reduction before what follows (step()), and releases transient buffers.
  void wait_reduce();
  // Orders it before the current stream's next work (an update on its own stream) but keeps the buffers
  // until wait_reduce, called later from the stream that frees them.
  void order_reduce_before_current_stream();
  bool is_reduce_pending() const { return reduce_work_ != nullptr; }

  // ---- parameters ----
  // Launches the allgather of the rank's slices into the full buffer (stage 3: allocating it first) when
  // the bucket is sharded; a no-op otherwise.
  void unshard();
  // Orders the gather before the caller's next work (a stream wait on CUDA).
  void wait_unshard();
  // Stage 3: frees the gathered buffer (the views stay, the memory goes). A no-op at stages 0–2.
  void reshard();
  // The optimizer (or a load) wrote new values into the rank's slices, so any full copy is stale:
  // stages 1–2 become sharded until the next unshard, stage 3 reshards; stage 0 updated the whole buffer.
  void slices_updated();
  bool is_gathered() const { return residency_ != Residency::sharded; }  // gathered or on its way
  int64_t gathered_bytes() const;  // stage 3: bytes of the gathered buffer when allocated

 private:
  std::vector<size_t> unit_indices() const;
  Unit& unit(size_t u) const { return (*env_.units)[u]; }
  int64_t padded_numel() const;
  // Each unit's [padded_numel] part of a [Σ padded] buffer of the bucket, in unit order.
  std::vector<torch::Tensor> unit_parts(const torch::Tensor& bucket_buffer) const;
  // Points unit u's parameters' .grad at their slots of `grad_flat` ([padded_numel], the reduce dtype):
  // autograd then accumulates the gradients in place there, with no copy.
  void point_grads_at(size_t u, const torch::Tensor& grad_flat) const;
  void drop_grads(size_t u) const;  // .grad undefined again; the memory is released by its owner

  size_t first_;
  size_t last_;
  BucketEnv env_;
  WorkHandle reduce_work_;
  WorkHandle gather_work_;
  torch::Tensor grad_buffer_;   // [Σ padded] reduce dtype, stages 2–3, from first gradient to reduction
  int64_t grad_bytes_in_flight_ = 0;  // the buffer's bytes while its reduction is not waited for
  torch::Tensor param_buffer_;  // [Σ padded] compute dtype, stage 3: storage allocated only while gathered
  Residency residency_ = Residency::gathered;  // stage 3 starts sharded (set in the constructor)
};

}  // namespace zest
