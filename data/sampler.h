// DistributedSampler: which dataset samples a rank reads, in which order: a per-epoch seeded shuffle
// that every rank computes identically, split so that ranks are disjoint and together complete, and a
// position {epoch, index} that can be saved and restored mid-epoch, also at another world size (through
// the world-independent GlobalPosition).
#pragma once

#include <cstdint>
#include <vector>

namespace zest {

struct SamplerPosition {
  int64_t epoch = 0;
  int64_t index = 0;  // samples of this rank's epoch list already consumed
  bool operator==(const SamplerPosition& other) const { return epoch == other.epoch && index == other.index; }
};

// Where all ranks together stand in the sample stream, independent of the world size: `consumed`
// positions [0, consumed) of epoch `epoch`'s global order have been read (by some rank).
struct GlobalPosition {
  int64_t epoch = 0;
  int64_t consumed = 0;
  bool operator==(const GlobalPosition& other) const { return epoch == other.epoch && consumed == other.consumed; }
};

struct SamplerOptions {
  uint64_t seed = 0;
  bool shuffle = true;
  // true: the last size % world samples of each (shuffled) epoch are dropped so every rank gets the
  // same count; false: the epoch is padded to a multiple of the world size by repeating its first
  // samples (so a few samples are seen twice per epoch).
  bool drop_last = false;
  // Aspect-ratio buckets (Dataset::sample_groups): samples of a batch must share a group. Then epoch e's
  // order is made of blocks of group_batch · world samples of one group (each group's samples shuffled,
  // cut into blocks, its last block filled up with the group's first samples; the blocks shuffled), so
  // every rank's group_batch consecutive samples come from one group. drop_last does not apply.
  std::vector<int64_t> groups;
  int64_t group_batch = 1;
};

// Epoch e's global order is a Fisher–Yates shuffle of 0..size−1 driven by mt19937_64 seeded with
// (seed, e) (both fully specified by the standard, so every rank and platform agrees); rank r takes
// positions r, r + W, r + 2W, ... of the (dropped or padded) order.
class DistributedSampler {
 public:
  DistributedSampler(int64_t dataset_size, int rank, int world_size, const SamplerOptions& options = {});

  int64_t dataset_size() const { return dataset_size_; }
  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  int64_t samples_per_rank() const { return per_rank_; }  // per epoch
  // Positions of one epoch's global order: the dataset size, or with groups the padded block count.
  int64_t global_epoch_size() const { return options_.groups.empty() ? dataset_size_ : per_rank_ * world_size_; }

  // This rank's sample indices of epoch `epoch`, in order (a pure function of the constructor's arguments).
  std::vector<int64_t> epoch_indices(int64_t epoch) const;

  // The sample at the current position, then advance (rolling over into the next epoch).
  int64_t next();
  // The next `count` samples (may span epochs).
  std::vector<int64_t> next_n(int64_t count);

  SamplerPosition state() const;
  void load_state(const SamplerPosition& position);  // checked: index within the epoch

  // Every rank at `position` together: index · world positions of the epoch's order are consumed.
  GlobalPosition to_global(const SamplerPosition& position) const;
  // This rank's position continuing `global` (saved by any world size): the epoch's order is re-split,
  // and each rank resumes at index ⌊consumed / world⌋, so no sample of the epoch is skipped and at most
  // world − 1 of them are read twice (none when consumed is a multiple of the world size). Past this
  // world's epoch length it is the start of the next epoch. Checked: consumed within one epoch.
  SamplerPosition from_global(const GlobalPosition& global) const;

 private:
  int64_t dataset_size_;
  int rank_;
  int world_size_;
  SamplerOptions options_;
  int64_t per_rank_ = 0;
  SamplerPosition position_;
  // The current epoch's list, cached: rebuilt when the epoch changes.
  std::vector<int64_t> cached_;
  int64_t cached_epoch_ = -1;

  std::vector<int64_t> grouped_order(int64_t epoch) const;  // the global order with groups
  int64_t num_groups_ = 0;
};

}  // namespace zest
