// ParamResidency: which buckets' parameters are gathered when. Stages 1–2: every bucket's updated slices
// are allgathered right after a step, and a unit's next forward waits for its own bucket only (the first
// units compute while later buckets still gather). Stage 3: a bucket is gathered just before the forward
// or backward of its units (and `prefetch` buckets ahead, in forward or backward order) and released
// after its forward (reshard_after_forward) and once its gradients are reduced.
#pragma once

#include "engine/bucket.h"
#include "engine/sharding_policy.h"

#include <vector>

namespace zest {

class ParamResidency {
 public:
  // needed_buckets[u]: the buckets unit u's forward reads (its own, then owners of tied parameters).
  // is_lazy: a unit's forward waits for its own bucket's post-step gather (CUDA: a stream wait, so the
  // gathers overlap the first units' compute); otherwise every gather is waited for at the end of the
  // step (the CPU backends progress only while waited on, so waiting later gains nothing there).
  ParamResidency(std::vector<Bucket>& buckets, std::vector<std::vector<size_t>> needed_buckets,
                 const ShardingPolicy& policy, int prefetch, bool is_lazy);

  // Between begin_backward and end_backward, forwards are checkpointing recomputes: prefetch then runs in
  // backward order.
  void begin_backward() { is_in_backward_ = true; }
  void before_forward(size_t unit_idx);   // every run of the unit, a checkpointing recompute included
  void after_forward(size_t unit_idx);    // the step's forward only
  void before_backward(size_t unit_idx);
  void bucket_reduced(size_t bucket_idx);
  void end_backward();
  // After the optimizer: every bucket's slices changed. Stages 1–2 launch every bucket's gather; buckets
  // of units never seen running through the engine's runner (a model calling parameters directly) are
  // waited for at once.
  void after_step();
  // The same after a load wrote the slices (wait_all: every gather is waited for at once).
  void slices_updated(bool wait_all);
  // Every gather done and every bucket gathered: parameters readable by anyone (stage 3 gathers all).
  void gather_all_now();
  // Orders every gather in flight before the caller's next work, gathering nothing new: the end of a
  // captured step, whose graph must join the collective streams it forked.
  void join_gathers();
  // Stage 3: the largest number of buckets gathered at once so far (prefetch bound check in tests).
  int peak_gathered_buckets() const { return peak_gathered_; }

 private:
  void gather(size_t bucket_idx);
  void prefetch(size_t bucket_idx, int direction);
  void note_gathered();

  std::vector<Bucket>& buckets_;
  const std::vector<std::vector<size_t>> needed_buckets_;
  const ShardingPolicy policy_;
  const int prefetch_;
  const bool is_lazy_;
  std::vector<char> seen_in_forward_;  // per unit, since the last step
  int peak_gathered_ = 0;
  bool is_in_backward_ = false;
};

}  // namespace zest
