// Motion shards: validation of every tensor against dataset.json (widths, sample counts, offsets),
// and sample assembly (crop window read straight from the file, normalisation, padding, masks).
#include "data/motion_dataset.h"

#include "data/motion_stats.h"
#include "core/check.h"

#include <algorithm>
#include <filesystem>

namespace zest {

MotionDataset::MotionDataset(std::string dir, DatasetManifest manifest, const DatasetOptions& options)
    : Dataset(std::move(dir), std::move(manifest)) {
  ZEST_CHECK(options.caption_dropout == 0.0, this->dir(), ": data.caption_dropout is for latent datasets (",
             format_name(DatasetFormat::latents), "); this one is ", format_name(this->manifest().format));
  const DatasetManifest& m = this->manifest();
  motion_dim_ = m.feature("motion_dim");
  text_tokens_ = m.feature("text_tokens");
  text_dim_ = m.feature("text_dim");
  pooled_dim_ = m.feature("pooled_dim");
  ZEST_CHECK(pooled_dim_ > 0, this->dir(), "/dataset.json: features.pooled_dim must be > 0 for motion");
  for (size_t shard = 0; shard < num_shards(); ++shard) validate_shard(shard);
  ZEST_CHECK(!m.stats_file.empty(), this->dir(), "/dataset.json: a motion dataset needs \"stats\": the file "
             "with per-feature mean/std (`zest data stats DIR` computes it)");
  const MotionStats stats =
      read_motion_stats(m.stats_path(this->dir(), /*must_exist=*/false), motion_dim_);
  mean_ = stats.mean;
  std_ = stats.std;
  ZEST_CHECK(options.seq_len >= 0, "motion dataset: seq_len ", options.seq_len, " must be >= 0");
  seq_len_ = options.seq_len > 0 ? options.seq_len : max_frames_;
}

void MotionDataset::validate_shard(size_t shard) {
  const int64_t n = manifest().shards[shard].samples;
  const std::string& path = reader(shard).path();
  expect_tensor(shard, "motion_offsets", {torch::kInt64}, {n + 1});
  auto offsets_tensor = reader(shard).read("motion_offsets");
  std::vector<int64_t> offsets(offsets_tensor.data_ptr<int64_t>(), offsets_tensor.data_ptr<int64_t>() + n + 1);
  ZEST_CHECK(offsets[0] == 0, path, ": motion_offsets[0] = ", offsets[0], ", must be 0");
  for (int64_t k = 0; k < n; ++k) {
    ZEST_CHECK(offsets[k + 1] > offsets[k], path, ": motion_offsets must increase (clip ", k, " has ",
               offsets[k + 1] - offsets[k], " frames)");
    max_frames_ = std::max(max_frames_, offsets[k + 1] - offsets[k]);
  }
  expect_tensor(shard, "motion", float_dtypes(), {offsets[n], motion_dim_});
  expect_tensor(shard, "text_tokens", float_dtypes(), {n, text_tokens_, text_dim_});
  expect_tensor(shard, "text_mask", {torch::kBool, torch::kUInt8}, {n, text_tokens_});
  expect_tensor(shard, "text_pooled", float_dtypes(), {n, pooled_dim_});
  offsets_.push_back(std::move(offsets));
}

int64_t MotionDataset::clip_frames(int64_t index) const {
  const Location at = locate(index);
  const auto& offsets = offsets_[at.shard];
  return offsets[at.local + 1] - offsets[at.local];
}

Sample MotionDataset::get(int64_t index, uint64_t seed) const {
  const Location at = locate(index);
  const safetensors::Reader& r = reader(at.shard);
  const int64_t first = offsets_[at.shard][at.local];
  const int64_t frames = offsets_[at.shard][at.local + 1] - first;
  const int64_t kept = std::min(frames, seq_len_);
  const uint64_t windows = static_cast<uint64_t>(std::max<int64_t>(frames - seq_len_ + 1, 1));
  const int64_t start = static_cast<int64_t>(seed % windows);  // 0 when the clip fits

  const auto clip = r.read_flat_range("motion", (first + start) * motion_dim_, kept * motion_dim_)
                        .view({kept, motion_dim_})
                        .to(torch::kFloat32);
  auto x = torch::zeros({seq_len_, motion_dim_}, torch::kFloat32);
  x.narrow(0, 0, kept).copy_((clip - mean_) / std_);
  auto x_mask = torch::zeros({seq_len_}, torch::kBool);
  x_mask.narrow(0, 0, kept).fill_(true);

  const int64_t k = at.local;
  Sample s;
  s["x"] = x;
  s["x_mask_temporal"] = x_mask;
  s["ctxt_input"] = r.read_flat_range("text_tokens", k * text_tokens_ * text_dim_, text_tokens_ * text_dim_)
                        .view({text_tokens_, text_dim_})
                        .to(torch::kFloat32);
  s["ctxt_mask_temporal"] = r.read_flat_range("text_mask", k * text_tokens_, text_tokens_).to(torch::kBool);
  s["vtxt_input"] = r.read_flat_range("text_pooled", k * pooled_dim_, pooled_dim_).view({1, pooled_dim_})
                        .to(torch::kFloat32);
  return s;
}

int64_t MotionDataset::items_in(const Sample& batch) const {
  return batch.at("x_mask_temporal").sum().item<int64_t>();  // padded frames do not count
}

SampleBytes MotionDataset::sample_bytes() const {
  SampleBytes b;
  b.fixed = text_tokens_ * text_dim_ * 4 + text_tokens_ + pooled_dim_ * 4;  // ctxt_input, ctxt_mask, vtxt_input
  b.per_frame = motion_dim_ * 4 + 1;                                        // x, x_mask_temporal
  b.frames = seq_len_;
  return b;
}

}  // namespace zest
