// When parameters are gathered and released (see param_residency.h).
#include "engine/param_residency.h"

#include "core/check.h"

#include <algorithm>

namespace zest {

ParamResidency::ParamResidency(std::vector<Bucket>& buckets, std::vector<std::vector<size_t>> needed_buckets,
                               const ShardingPolicy& policy, int prefetch, bool is_lazy)
    : buckets_(buckets),
      needed_buckets_(std::move(needed_buckets)),
      policy_(policy),
      prefetch_(prefetch),
      is_lazy_(is_lazy) {
  seen_in_forward_.assign(needed_buckets_.size(), 0);
}

void ParamResidency::gather(size_t b) {
  buckets_[b].unshard();
  note_gathered();
}

void ParamResidency::note_gathered() {
  const int gathered = static_cast<int>(std::count_if(buckets_.begin(), buckets_.end(),
                                                      [](const Bucket& bucket) { return bucket.is_gathered(); }));
  peak_gathered_ = std::max(peak_gathered_, gathered);
}

void ParamResidency::prefetch(size_t b, int direction) {
  for (int k = 1; k <= prefetch_; ++k) {
    const int next = static_cast<int>(b) + direction * k;
    if (next < 0 || next >= static_cast<int>(buckets_.size())) return;
    gather(static_cast<size_t>(next));
  }
}

void ParamResidency::before_forward(size_t u) {
  seen_in_forward_[u] = 1;
  if (policy_.gathers_per_unit()) {
    for (size_t b : needed_buckets_[u]) gather(b);
    prefetch(needed_buckets_[u].front(), is_in_backward_ ? -1 : +1);
  }
  for (size_t b : needed_buckets_[u]) buckets_[b].wait_unshard();
}

void ParamResidency::after_forward(size_t u) {
  if (!policy_.reshards_after_forward()) return;
  const size_t own = needed_buckets_[u].front();
  for (size_t b : needed_buckets_[u]) {
    if (b == buckets_.size() - 1) continue;  // backward starts with the last bucket: keep it
    if (b == own && u != buckets_[b].last()) continue;  // the bucket's later units still run
    buckets_[b].reshard();
  }
}

void ParamResidency::before_backward(size_t u) {
  if (!policy_.gathers_per_unit()) return;
  for (size_t b : needed_buckets_[u]) gather(b);
  prefetch(needed_buckets_[u].front(), -1);
  for (size_t b : needed_buckets_[u]) buckets_[b].wait_unshard();
}

void ParamResidency::bucket_reduced(size_t b) { buckets_[b].reshard(); }

void ParamResidency::end_backward() {
  is_in_backward_ = false;
  for (Bucket& bucket : buckets_) bucket.reshard();
}

void ParamResidency::after_step() { slices_updated(/*wait_all=*/false); }

void ParamResidency::slices_updated(bool wait_all) {
  for (Bucket& bucket : buckets_) bucket.slices_updated();
  if (policy_.gathers_after_step()) {
    for (Bucket& bucket : buckets_) bucket.unshard();
    for (Bucket& bucket : buckets_) {
      for (size_t u = bucket.first(); u <= bucket.last(); ++u) {
        if (wait_all || !is_lazy_ || !seen_in_forward_[u]) {
          bucket.wait_unshard();
          break;
        }
      }
    }
  }
  std::fill(seen_in_forward_.begin(), seen_in_forward_.end(), 0);
}

void ParamResidency::gather_all_now() {
  for (size_t b = 0; b < buckets_.size(); ++b) {
    gather(b);
    buckets_[b].wait_unshard();
  }
}

void ParamResidency::join_gathers() {
  for (Bucket& bucket : buckets_) bucket.wait_unshard();
}

}  // namespace zest
