// MotionDataset (format zest.motion.v1): variable-length motion clips with cached text features,
// served as fixed-length, normalised samples under HY-Motion's input names.
#pragma once

#include "data/dataset.h"

#include <cstdint>
#include <vector>

namespace zest {

// A sample: x [seq_len, motion_dim] float32 (normalised with the dataset's mean/std; padded frames 0),
// x_mask_temporal [seq_len] bool (true = real frame), ctxt_input [text_tokens, text_dim] float32,
// ctxt_mask_temporal [text_tokens] bool, vtxt_input [1, pooled_dim] float32.
// A clip longer than seq_len is cropped to a window whose start is drawn from the sample seed; a
// shorter one is padded at the end.
class MotionDataset final : public Dataset {
 public:
  MotionDataset(std::string dir, DatasetManifest manifest, const DatasetOptions& options);

  Sample get(int64_t index, uint64_t seed) const override;
  SampleBytes sample_bytes() const override;
  int64_t items_in(const Sample& batch) const override;  // valid frames only

  int64_t seq_len() const { return seq_len_; }
  int64_t clip_frames(int64_t index) const;  // frames of the stored clip
  int64_t max_clip_frames() const { return max_frames_; }

 private:
  void validate_shard(size_t shard);

  int64_t motion_dim_ = 0;
  int64_t text_tokens_ = 0;
  int64_t text_dim_ = 0;
  int64_t pooled_dim_ = 0;
  int64_t seq_len_ = 0;
  int64_t max_frames_ = 0;
  std::vector<std::vector<int64_t>> offsets_;  // per shard: clip k is frames [offsets[k], offsets[k+1])
  torch::Tensor mean_;                         // [motion_dim]
  torch::Tensor std_;                          // [motion_dim]
};

}  // namespace zest
