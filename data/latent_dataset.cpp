// Latent shards: validation against dataset.json and per-sample reads of each tensor's slice.
#include "data/latent_dataset.h"

#include "core/check.h"

namespace zest {

LatentDataset::LatentDataset(std::string dir, DatasetManifest manifest)
    : Dataset(std::move(dir), std::move(manifest)) {
  const DatasetManifest& m = this->manifest();
  channels_ = m.feature("channels");
  height_ = m.feature("height");
  width_ = m.feature("width");
  text_tokens_ = m.feature("text_tokens");
  text_dim_ = m.feature("text_dim");
  pooled_dim_ = m.feature("pooled_dim");
  time_ids_ = m.feature("time_ids") != 0;
  for (size_t shard = 0; shard < num_shards(); ++shard) validate_shard(shard);
}

void LatentDataset::validate_shard(size_t shard) const {
  const int64_t n = manifest().shards[shard].samples;
  expect_tensor(shard, "latents", float_dtypes(), {n, channels_, height_, width_});
  expect_tensor(shard, "text_embeds_seq", float_dtypes(), {n, text_tokens_, text_dim_});
  if (pooled_dim_ > 0) expect_tensor(shard, "pooled", float_dtypes(), {n, pooled_dim_});
  if (time_ids_) expect_tensor(shard, "time_ids", float_dtypes(), {n, 6});
}

Sample LatentDataset::get(int64_t index, uint64_t /*seed*/) const {
  const Location at = locate(index);
  const safetensors::Reader& r = reader(at.shard);
  const int64_t k = at.local;
  // One sample's slice of a [n, ...] tensor, as float32 of the per-sample shape.
  const auto row = [&](const char* name, std::vector<int64_t> shape) {
    int64_t numel = 1;
    for (int64_t d : shape) numel *= d;
    return r.read_flat_range(name, k * numel, numel).view(shape).to(torch::kFloat32);
  };
  Sample s;
  s["sample"] = row("latents", {channels_, height_, width_});
  s["encoder_hidden_states"] = row("text_embeds_seq", {text_tokens_, text_dim_});
  if (pooled_dim_ > 0) s["text_embeds"] = row("pooled", {pooled_dim_});
  if (time_ids_) s["time_ids"] = row("time_ids", {6});
  return s;
}

SampleBytes LatentDataset::sample_bytes() const {
  SampleBytes b;
  b.fixed = (channels_ * height_ * width_ + text_tokens_ * text_dim_ + pooled_dim_ + (time_ids_ ? 6 : 0)) * 4;
  return b;
}

}  // namespace zest
