// SnapshotStaging: the host buffer an asynchronous save copies the rank's shard into (fp32 master,
// optimizer states, EMA: the whole RankSnapshot), allocated once at the size of the first save and
// reused by every later one; page-locked when the engine runs on a GPU, so the copy is a DMA queued on a
// side stream while the host goes back to training. The background writer waits for the copy's mark; the
// compute stream waits for it only before the next optimizer update (the one thing that overwrites it).
#pragma once

#include "checkpoint/snapshot.h"
#include "optim/side_stream.h"

#include <memory>

namespace zest::checkpoint {

class SnapshotStaging {
 public:
  SnapshotStaging() = default;
  SnapshotStaging(const SnapshotStaging&) = delete;
  SnapshotStaging& operator=(const SnapshotStaging&) = delete;

  // Allocates the buffer for the snapshot of an engine's `state` now (it is otherwise allocated by the
  // first stage()).
  void reserve(const EngineState& state);
  // Queues the copy of `state`'s slices into the buffer (after the work queued on the current stream so
  // far) and returns the snapshot of views into it; `copied` is reached once the copy is done. The
  // previous snapshot must no longer be in use (its write finished).
  RankSnapshot stage(const EngineState& state, SideStream::Mark& copied);
  // The current stream waits (on the device) for the last copy: call before the next optimizer update.
  void order_before_update();
  int64_t bytes() const { return buffer_.defined() ? buffer_.nbytes() : 0; }

 private:
  torch::Tensor buffer_;  // [kinds · shard] fp32
  std::unique_ptr<SideStream> copies_;
  bool copy_queued_ = false;
};

}  // namespace zest::checkpoint
