// The reused host staging of asynchronous saves (see snapshot_staging.h).
#include "checkpoint/snapshot_staging.h"

#include "core/check.h"
#include "optim/pinned_memory.h"

namespace zest::checkpoint {
namespace {

// Elements of the snapshot: every shard's slices of every unit (this rank's share of each unit).
int64_t snapshot_numel(const EngineState& state) {
  int64_t per_shard = 0;
  for (const UnitShardLayout& unit : state.units) per_shard += unit.layout.slice(state.rank).numel;
  return static_cast<int64_t>(state.shards.size()) * per_shard;
}

}  // namespace

void SnapshotStaging::reserve(const EngineState& state) {
  const int64_t numel = snapshot_numel(state);
  if (buffer_.defined() && buffer_.numel() == numel) return;
  buffer_ = torch::Tensor();  // the old buffer goes before the new one comes
  // Page-locked for a GPU engine (its shard lives on the device), ordinary memory otherwise.
  const torch::Device source = state.shard(kMasterShard).device();
  buffer_ = host_tensor(numel, torch::kFloat32, source);
  if (!copies_) copies_ = std::make_unique<SideStream>(source);
}

RankSnapshot SnapshotStaging::stage(const EngineState& state, SideStream::Mark& copied) {
  reserve(state);
  RankSnapshot views = snapshot_state(state, /*copy=*/false, /*to_host=*/false);
  RankSnapshot staged;
  staged.rank = views.rank;
  staged.kinds = views.kinds;
  staged.units = views.units;
  int64_t offset = 0;
  torch::NoGradGuard no_grad;
  copies_->run([&] {
    for (const auto& kind : views.slices) {
      std::vector<torch::Tensor> per_unit;
      for (const torch::Tensor& slice : kind) {
        torch::Tensor target = buffer_.narrow(0, offset, slice.numel());
        target.copy_(slice, /*non_blocking=*/true);  // DMA from the device into page-locked memory
        per_unit.push_back(target);
        offset += slice.numel();
      }
      staged.slices.push_back(std::move(per_unit));
    }
  });
  ZEST_CHECK(offset == buffer_.numel(), "checkpoint staging: the snapshot has ", offset, " elements, the buffer ",
             buffer_.numel());
  copied = copies_->mark();
  copy_queued_ = true;
  return staged;
}

void SnapshotStaging::order_before_update() {
  if (!copy_queued_) return;
  copies_->join();
  copy_queued_ = false;
}

}  // namespace zest::checkpoint
