// GradReducer: the first stop of a gradient's walk (docs/design.md, "The gradient walk"). It hooks every
// unit parameter's gradient accumulator, keeps each unit's progress through a backward in one struct,
// decides when each bucket's gradients are complete and launches the reductions in the one order every
// rank uses (the last bucket first), so collectives always match across ranks however autograd orders the
// work. A unit is complete when its own backward has returned (the marker on its inputs; per-parameter
// accumulation flags for units run without markers) and so has the backward of every unit that uses one
// of its parameters (tied parameters) — counting accumulator calls would let a parameter accumulated
// twice (tied, under reentrant checkpointing) end its unit early.
#pragma once

#include "engine/bucket.h"
#include "engine/unit.h"

#include <torch/torch.h>

#include <deque>
#include <functional>
#include <memory>
#include <vector>

namespace zest {

class GradReducer {
 public:
  // bucket_of_unit[u]: the bucket unit u's gradients are reduced with.
  // max_in_flight: reductions allowed in flight before the oldest is waited for, which bounds the
  // transient gradient buckets (0 = no bound).
  // is_accumulation_final: a parameter's gradient is accumulated once per backward (no reentrant
  // checkpointing), so a unit without a backward signal is complete once all its parameters accumulated;
  // otherwise such a unit completes only at the end of backward.
  GradReducer(const std::vector<Unit>& units, std::vector<Bucket>& buckets, const std::vector<size_t>& bucket_of_unit,
              int max_in_flight, bool is_accumulation_final);
  GradReducer(const GradReducer&) = delete;
  GradReducer& operator=(const GradReducer&) = delete;

  // Hooks every unit parameter's gradient accumulator (AccumulateGrad): before it accumulates,
  // grad_arriving; after, grad_accumulated. Calling it again drops the previous accumulators (the reducer
  // is their only owner between steps) and hooks the new ones autograd makes, on the current stream.
  void hook_params();

  // ---- one micro-step ----
  void marker_attached(size_t unit_idx);  // forward: the unit's inputs carry a marker
  // reduce = false (stages 0–1 before the last micro-step): gradients only accumulate locally.
  void begin_backward(bool reduce, bool accumulate);
  // The unit's backward is about to start: its gradient slots exist from here on (the bucket's
  // ensure_grads), so fused kernels can accumulate into .grad before autograd would.
  void unit_backward_starting(size_t unit_idx);
  void grad_arriving(size_t unit_idx);                     // from the accumulator's pre-hook
  void grad_accumulated(size_t unit_idx, size_t slot_idx);  // from its post-hook
  void unit_backward_done(size_t unit_idx);
  void end_backward();  // launches what is left (units whose markers never came back: unused outputs)
  // Orders every launched reduction before the optimizer (stream waits on CUDA).
  void wait_all();
  // The same for bucket b's reduction alone, if it is in flight (an update of that bucket during backward).
  void wait_bucket(size_t bucket_idx);

  // Called with the bucket index right after its reduction is launched (stage 3 releases its parameters).
  std::function<void(size_t bucket_idx)> on_launched;

 private:
  // Everything the reducer keeps per unit: its bucket, and where its backward stands in this micro-step.
  struct UnitProgress {
    size_t bucket = 0;                      // fixed: the bucket its gradients are reduced with
    int markers_pending = 0;                // markers attached to its inputs, not yet returned
    bool is_marked = false;                 // its forward carried a marker
    std::vector<char> slot_accumulated;     // per parameter: its gradient has accumulated
    int slots_left = 0;                     // parameters not yet accumulated
    void start_micro_step(size_t num_params) {
      markers_pending = 0;
      is_marked = false;
      slot_accumulated.assign(num_params, 0);
      slots_left = static_cast<int>(num_params);
    }
  };

  // What the hooks reach the reducer through: autograd keeps accumulator nodes (and their hooks) alive as
  // long as a graph refers to them, so a hook may outlive the reducer; it then finds the link expired.
  struct HookLink {
    GradReducer* reducer = nullptr;
  };
  class GradArrivingHook;     // the accumulator's pre-hook (grad_reducer.cpp)
  class GradAccumulatedHook;  // its post-hook

  bool is_own_backward_done(size_t unit_idx) const;
  bool is_complete(size_t unit_idx) const;
  void launch_ready(bool flush);
  void reset_tracking();

  const std::vector<Unit>& units_;
  std::vector<Bucket>& buckets_;
  const int max_in_flight_;
  const bool is_accumulation_final_;

  std::vector<UnitProgress> progress_;  // per unit
  std::vector<char> is_launched_;       // per bucket, this micro-step
  int next_bucket_ = -1;              // launched from the last to the first
  bool is_reducing_ = false;
  bool is_accumulating_ = false;
  std::deque<size_t> in_flight_;      // launched, not yet waited (CPU bound)

  std::shared_ptr<HookLink> hook_link_ = std::make_shared<HookLink>(HookLink{this});
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;  // keep the hooked nodes alive
};

}  // namespace zest
