// Bucket: a run of consecutive units whose collectives go out together (one group of NCCL calls, one
// packed MPI call) — FSDP2's parameter group. It owns the verbs the stages are made of:
//   gradients:  ensure_grad_buffer → reduce_grads → (step) wait_reduce
//   parameters: gather_params → wait_params, and release_params (stage 3 only)
// What each verb does is the ShardingPolicy's choice; the engine only orders the verbs. A bucket of one
// unit is just a bucket.
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
// waited for: what stage 2 holds instead of stage 1's persistent full gradients.
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

class Bucket {
 public:
  Bucket(size_t first, size_t last, const BucketEnv& env);

  size_t first() const { return first_; }
  size_t last() const { return last_; }
  bool contains(size_t unit_idx) const { return unit_idx >= first_ && unit_idx <= last_; }
  std::string describe() const;  // "bucket 3 (blocks.4..blocks.6)"

  // ---- gradients ----
  // Stages 2–3: gives the bucket's units a zeroed reduce-dtype gradient buffer (their .grad views) the
  // first time one of their gradients arrives in a backward. No-op when it exists or at stages 0–1.
  void ensure_grad_buffer();
  // Launches the bucket's gradient collective (the policy's GradReduction). accumulate: add into the
  // gradient shard (a later micro-step of the same step) instead of overwriting it.
  void reduce_grads(bool accumulate);
  // Orders the launched reduction before what follows (step()), and releases transient buffers.
  void wait_reduce();
  bool is_reduce_pending() const { return reduce_work_ != nullptr; }

  // ---- parameters ----
  // Stages 1–2: allgathers the updated slices into the full buffer (in place) after a step. Stage 3:
  // allocates the gathered buffer and allgathers the shard into it. No-op when already gathered.
  void gather_params();
  // Orders the gather before the caller's next work (a stream wait on CUDA).
  void wait_params();
  // Stage 3: frees the gathered buffer (the views stay, the memory goes).
  void release_params();
  bool is_gathered() const { return is_gathered_; }
  int64_t gathered_bytes() const;  // stage 3: bytes of the gathered buffer when allocated

 private:
  std::vector<size_t> unit_indices() const;
  Unit& unit(size_t u) const { return (*env_.units)[u]; }
  int64_t padded_numel() const;

  size_t first_;
  size_t last_;
  BucketEnv env_;
  WorkHandle reduce_work_;
  WorkHandle gather_work_;
  torch::Tensor grad_buffer_;   // [Σ padded] reduce dtype, stages 2–3, from first gradient to reduction
  int64_t grad_bytes_in_flight_ = 0;  // the buffer's bytes while its reduction is not waited for
  torch::Tensor param_buffer_;  // [Σ padded] compute dtype, stage 3: storage allocated only while gathered
  bool is_gathered_ = true;     // stage 3 starts sharded (set in the constructor)
};

}  // namespace zest
