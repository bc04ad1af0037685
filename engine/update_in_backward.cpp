// Bucket-by-bucket optimizer updates during backward (see update_in_backward.h).
#include "engine/update_in_backward.h"

#include "core/check.h"
#include "engine/step_decision.h"
#include "engine/sums_of_squares.h"

namespace zest {

UpdateInBackward::UpdateInBackward(std::vector<Bucket>& buckets, GradReducer& reducer, Optimizer& optimizer,
                                   const StepRules& rules, torch::Tensor scalars, std::vector<torch::Tensor> norm_pieces,
                                   std::vector<size_t> pieces_of_unit, torch::Tensor param_sumsq)
    : buckets_(buckets),
      reducer_(reducer),
      optimizer_(optimizer),
      rules_(rules),
      scalars_(std::move(scalars)),
      norm_pieces_(std::move(norm_pieces)),
      pieces_of_unit_(std::move(pieces_of_unit)),
      param_sumsq_(std::move(param_sumsq)),
      stream_(scalars_.device()) {
  ZEST_CHECK(pieces_of_unit_.size() == optimizer_.segments().size() + 1 &&
                 pieces_of_unit_.back() == norm_pieces_.size() &&
                 param_sumsq_.numel() == static_cast<int64_t>(norm_pieces_.size()),
             "UpdateInBackward: ", pieces_of_unit_.size(), " piece offsets for ", optimizer_.segments().size(),
             " units and ", norm_pieces_.size(), " pieces");
}

void UpdateInBackward::begin_step() {
  run_step_decision(StepDecision::in_backward_begin, rules_, scalars_, param_sumsq_);
}

void UpdateInBackward::bucket_reduced(size_t b) {
  torch::NoGradGuard no_grad;
  release_awaiting();
  Bucket& bucket = buckets_[b];
  // A host backend's wait is the order; a device's reduction is ordered on the update stream alone, so the
  // rest of the backward goes on meanwhile, and its buffers stay until release_awaiting.
  const bool is_on_device = scalars_.is_cuda();
  if (!is_on_device) reducer_.wait_bucket(b);
  stream_.run([&] {
    if (is_on_device) bucket.order_reduce_before_current_stream();
    const size_t first_piece = pieces_of_unit_[bucket.first()];
    const size_t end_piece = pieces_of_unit_[bucket.last() + 1];
    const auto count = static_cast<int64_t>(end_piece - first_piece);
    const torch::Tensor bucket_sumsq = param_sumsq_.narrow(0, static_cast<int64_t>(first_piece), count);
    sums_of_squares({norm_pieces_.begin() + first_piece, norm_pieces_.begin() + end_piece}, bucket_sumsq);
    run_step_decision(StepDecision::in_backward_bucket, rules_, scalars_, bucket_sumsq);
    optimizer_.step_segments(bucket.first(), bucket.last() + 1);
  });
  awaiting_release_ = b;
}

void UpdateInBackward::end_backward() { release_awaiting(); }

void UpdateInBackward::finish_step() {
  run_step_decision(StepDecision::in_backward_finish, rules_, scalars_, param_sumsq_);
}

// The compute stream joins the update stream, then frees the updated bucket's gradients in its own order:
// the allocator may hand the memory to the rest of the backward. The previous bucket's update was queued a
// whole unit's backward ago, so the join rarely holds. Only after an update of this step: a captured step
// must not wait on work of another.
void UpdateInBackward::release_awaiting() {
  if (!awaiting_release_) return;
  stream_.join();
  reducer_.wait_bucket(*awaiting_release_);  // the reduction's buffers go in this stream's order
  buckets_[*awaiting_release_].release_grads();
  awaiting_release_.reset();
}

}  // namespace zest
