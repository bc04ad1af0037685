// The gradient hooks, per-unit progress, bucket completion and launch order (see grad_reducer.h).
#include "engine/grad_reducer.h"

#include "core/check.h"

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>

namespace zest {

// ---- the hooks on each parameter's gradient accumulator ---------------------------------------------

class GradReducer::GradArrivingHook final : public torch::autograd::FunctionPreHook {
 public:
  GradArrivingHook(std::weak_ptr<HookLink> link, size_t unit_idx) : link_(std::move(link)), unit_(unit_idx) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& grads) override {
    if (const auto link = link_.lock()) link->reducer->grad_arriving(unit_);
    return grads;
  }

 private:
  std::weak_ptr<HookLink> link_;
  size_t unit_;
};

class GradReducer::GradAccumulatedHook final : public torch::autograd::FunctionPostHook {
 public:
  GradAccumulatedHook(std::weak_ptr<HookLink> link, size_t unit_idx, size_t slot_idx)
      : link_(std::move(link)), unit_(unit_idx), slot_(slot_idx) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list& /*inputs*/) override {
    if (const auto link = link_.lock()) link->reducer->grad_accumulated(unit_, slot_);
    return outputs;
  }

 private:
  std::weak_ptr<HookLink> link_;
  size_t unit_;
  size_t slot_;
};

void GradReducer::hook_params() {
  accumulators_.clear();  // the only owners between steps: the old nodes die, autograd makes new ones below
  for (size_t u = 0; u < units_.size(); ++u) {
    const auto& params = units_[u].params();
    for (size_t slot = 0; slot < params.size(); ++slot) {
      auto accumulator = torch::autograd::impl::grad_accumulator(params[slot]);
      ZEST_CHECK(accumulator != nullptr, "parameter ", units_[u].layout().slots[slot].name, " of unit ",
                 units_[u].name(), " has no gradient accumulator");
      accumulator->add_pre_hook(std::make_unique<GradArrivingHook>(hook_link_, u));
      accumulator->add_post_hook(std::make_unique<GradAccumulatedHook>(hook_link_, u, slot));
      accumulators_.push_back(std::move(accumulator));
    }
  }
}

// ---- completion and launch --------------------------------------------------------------------------

GradReducer::GradReducer(const std::vector<Unit>& units, std::vector<Bucket>& buckets,
                         const std::vector<size_t>& bucket_of_unit, int max_in_flight, bool is_accumulation_final)
    : units_(units), buckets_(buckets), max_in_flight_(max_in_flight), is_accumulation_final_(is_accumulation_final) {
  ZEST_CHECK(bucket_of_unit.size() == units.size(), "GradReducer: ", bucket_of_unit.size(), " bucket indices for ",
             units.size(), " units");
  progress_.resize(units.size());
  for (size_t u = 0; u < units.size(); ++u) progress_[u].bucket = bucket_of_unit[u];
  is_launched_.assign(buckets.size(), 0);
  reset_tracking();
}

void GradReducer::reset_tracking() {
  for (size_t u = 0; u < units_.size(); ++u) progress_[u].start_micro_step(units_[u].params().size());
  // is_launched_ stays until the next begin_backward.
}

void GradReducer::marker_attached(size_t u) {
  ++progress_[u].markers_pending;
  progress_[u].is_marked = true;
}

void GradReducer::begin_backward(bool reduce, bool accumulate) {
  is_reducing_ = reduce;
  is_accumulating_ = accumulate;
  next_bucket_ = static_cast<int>(buckets_.size()) - 1;
  std::fill(is_launched_.begin(), is_launched_.end(), 0);
}

void GradReducer::unit_backward_starting(size_t u) {
  const size_t b = progress_[u].bucket;
  if (!is_launched_[b]) buckets_[b].ensure_grads();
}

void GradReducer::grad_arriving(size_t u) {
  const size_t b = progress_[u].bucket;
  ZEST_CHECK(!is_reducing_ || !is_launched_[b], "a gradient of unit '", units_[u].name(), "' arrived after ",
             buckets_[b].describe(), " was reduced in this backward; the unit's parameters are used after its "
             "backward finished (a parameter shared with a unit declared later?)");
  buckets_[b].ensure_grads();
}

void GradReducer::grad_accumulated(size_t u, size_t slot) {
  UnitProgress& p = progress_[u];
  if (!p.slot_accumulated[slot]) {
    p.slot_accumulated[slot] = 1;
    --p.slots_left;
  }
  if (is_reducing_ && !p.is_marked && p.slots_left == 0) launch_ready(/*flush=*/false);
}

void GradReducer::unit_backward_done(size_t u) {
  ZEST_CHECK(progress_[u].markers_pending > 0, "unit '", units_[u].name(),
             "': backward finished more often than it ran");
  --progress_[u].markers_pending;
  if (is_reducing_) launch_ready(/*flush=*/false);
}

void GradReducer::end_backward() {
  if (is_reducing_) launch_ready(/*flush=*/true);
  reset_tracking();
}

bool GradReducer::is_own_backward_done(size_t u) const {
  const UnitProgress& p = progress_[u];
  if (p.is_marked) return p.markers_pending == 0;
  return is_accumulation_final_ && p.slots_left == 0;
}

bool GradReducer::is_complete(size_t u) const {
  if (!is_own_backward_done(u)) return false;
  const auto& users = units_[u].tied_users();
  return std::all_of(users.begin(), users.end(), [this](size_t t) { return is_own_backward_done(t); });
}

void GradReducer::launch_ready(bool flush) {
  while (next_bucket_ >= 0) {
    const size_t b = static_cast<size_t>(next_bucket_);
    Bucket& bucket = buckets_[b];
    if (!flush) {
      for (size_t u = bucket.first(); u <= bucket.last(); ++u) {
        if (!is_complete(u)) return;
      }
    }
    if (bucket.is_reduce_pending()) {  // the previous micro-step's reduction of this bucket (stages 2–3)
      bucket.wait_reduce();
      in_flight_.erase(std::find(in_flight_.begin(), in_flight_.end(), b));
    }
    bucket.reduce_grads(is_accumulating_);
    is_launched_[b] = 1;
    in_flight_.push_back(b);
    if (on_launched) on_launched(b);
    if (max_in_flight_ > 0 && static_cast<int>(in_flight_.size()) > max_in_flight_) {
      const size_t oldest = in_flight_.front();
      buckets_[oldest].wait_reduce();
      in_flight_.pop_front();
    }
    --next_bucket_;
  }
}

void GradReducer::wait_bucket(size_t b) {
  const auto at = std::find(in_flight_.begin(), in_flight_.end(), b);
  if (at == in_flight_.end()) return;
  buckets_[b].wait_reduce();
  in_flight_.erase(at);
}

void GradReducer::wait_all() {
  for (size_t b : in_flight_) buckets_[b].wait_reduce();
  in_flight_.clear();
}

}  // namespace zest
