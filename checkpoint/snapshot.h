// RankSnapshot: one rank's share of a checkpoint — for each kind (fp32 master, optimizer states, EMA) and
// unit, the slice [rank·S, (rank+1)·S) of the unit's flat buffer — and writing it as the rank's
// safetensors file. Stage 0 ranks hold whole units but write only their slice, so every stage has
// the same files.
#pragma once

#include "checkpoint/manifest.h"
#include "checkpoint/rank_file.h"
#include "engine/engine_state.h"

#include <torch/torch.h>

#include <string>
#include <vector>

namespace zest::checkpoint {

struct RankSnapshot {
  int rank = 0;
  std::vector<std::string> kinds;                   // "master", the optimizer's state names, "ema" if kept
  std::vector<std::string> units;                   // unit names
  std::vector<std::vector<torch::Tensor>> slices;   // [kind][unit] fp32 [shard_numel]

  int64_t nbytes() const;
};

// The slices of an engine's `state` (StatefulEngine::state). copy = false: views into its shards (the
// live buffers: write before the next step), device slices copied to the host unless `to_host` is false
// (then views on the device: SnapshotStaging copies them); copy = true: host copies that later training
// does not touch.
RankSnapshot snapshot_state(const EngineState& state, bool copy, bool to_host = true);

// Writes `snapshot` to `path` (tensors "<kind>.<unit>", kinds outermost; header metadata from
// `identity`, whose rank must be the snapshot's), fsyncs it, and returns its size and checksum. A failed
// write leaves no file behind.
FileRecord write_rank_file(const RankSnapshot& snapshot, const std::string& path, const RankFileIdentity& identity);

}  // namespace zest::checkpoint
