// Latent shards: validation against dataset.json (each shard at its own latent size when bucketed),
// per-sample reads of each tensor's slice, and caption dropout to the empty prompt's embedding.
#include "data/latent_dataset.h"

#include "core/check.h"
#include "data/seed.h"

#include <map>

namespace zest {

LatentDataset::LatentDataset(std::string dir, DatasetManifest manifest, const DatasetOptions& options)
    : Dataset(std::move(dir), std::move(manifest)), caption_dropout_(options.caption_dropout) {
  const DatasetManifest& m = this->manifest();
  channels_ = m.feature("channels");
  height_ = m.feature("height");
  width_ = m.feature("width");
  text_tokens_ = m.feature("text_tokens");
  text_dim_ = m.feature("text_dim");
  pooled_dim_ = m.feature("pooled_dim");
  time_ids_ = m.feature("time_ids") != 0;
  for (size_t shard = 0; shard < num_shards(); ++shard) validate_shard(shard);
  if (caption_dropout_ > 0) load_empty_prompt();
}

LatentDataset::LatentSize LatentDataset::size_of(size_t shard) const {
  const ShardEntry& e = manifest().shards[shard];
  return e.height > 0 ? LatentSize{e.height, e.width} : LatentSize{height_, width_};
}

void LatentDataset::validate_shard(size_t shard) const {
  const int64_t n = manifest().shards[shard].samples;
  const LatentSize s = size_of(shard);
  expect_tensor(shard, "latents", float_dtypes(), {n, channels_, s.height, s.width});
  expect_tensor(shard, "text_embeds_seq", float_dtypes(), {n, text_tokens_, text_dim_});
  if (pooled_dim_ > 0) expect_tensor(shard, "pooled", float_dtypes(), {n, pooled_dim_});
  if (time_ids_) expect_tensor(shard, "time_ids", float_dtypes(), {n, 6});
}

void LatentDataset::load_empty_prompt() {
  ZEST_CHECK(!manifest().empty_prompt_file.empty(), dir(), "/dataset.json names no \"empty_prompt\" file, which "
             "data.caption_dropout = ", caption_dropout_, " needs (the empty caption's text embedding; `zest data "
             "prepare images` writes it); set caption_dropout = 0 or prepare the dataset again");
  const safetensors::Reader r(manifest().empty_prompt_path(dir()));
  auto read = [&](const std::string& name, std::vector<int64_t> shape) {
    ZEST_CHECK(r.contains(name), r.path(), ": missing tensor '", name, "' (the empty caption's embedding)");
    const torch::Tensor t = r.read(name);
    ZEST_CHECK(t.sizes() == torch::IntArrayRef(shape), r.path(), ": tensor '", name, "' has shape ", t.sizes(),
               ", expected ", torch::IntArrayRef(shape), " (dataset.json's features)");
    return t.to(torch::kFloat32);
  };
  empty_tokens_ = read("text_embeds_seq", {text_tokens_, text_dim_});
  if (pooled_dim_ > 0) empty_pooled_ = read("pooled", {pooled_dim_});
}

bool LatentDataset::drops_caption(uint64_t seed) const {
  if (caption_dropout_ <= 0) return false;
  const double u = static_cast<double>(mix_seed(seed, 0xcab7) >> 11) * 0x1.0p-53;  // uniform in [0, 1)
  return u < caption_dropout_;
}

Sample LatentDataset::get(int64_t index, uint64_t seed) const {
  const Location at = locate(index);
  const safetensors::Reader& r = reader(at.shard);
  const int64_t k = at.local;
  const LatentSize size = size_of(at.shard);
  // One sample's slice of a [n, ...] tensor, as float32 of the per-sample shape.
  const auto row = [&](const char* name, std::vector<int64_t> shape) {
    int64_t numel = 1;
    for (int64_t d : shape) numel *= d;
    return r.read_flat_range(name, k * numel, numel).view(shape).to(torch::kFloat32);
  };
  Sample s;
  s["sample"] = row("latents", {channels_, size.height, size.width});
  const bool dropped = drops_caption(seed);
  s["encoder_hidden_states"] = dropped ? empty_tokens_.clone() : row("text_embeds_seq", {text_tokens_, text_dim_});
  if (pooled_dim_ > 0) s["text_embeds"] = dropped ? empty_pooled_.clone() : row("pooled", {pooled_dim_});
  if (time_ids_) s["time_ids"] = row("time_ids", {6});
  return s;
}

int64_t LatentDataset::items_in(const Sample& batch) const {
  const torch::Tensor& latents = batch.at("sample");  // [batch, channels, height, width]
  return latents.size(0) * latents.size(2) * latents.size(3);
}

SampleBytes LatentDataset::sample_bytes() const {
  int64_t pixels = height_ * width_;
  for (size_t shard = 0; shard < num_shards(); ++shard) pixels = std::max(pixels, size_of(shard).height * size_of(shard).width);
  SampleBytes b;
  b.fixed = (channels_ * pixels + text_tokens_ * text_dim_ + pooled_dim_ + (time_ids_ ? 6 : 0)) * 4;
  return b;
}

std::vector<int64_t> LatentDataset::sample_groups() const {
  std::map<std::pair<int64_t, int64_t>, int64_t> group_of_size;
  for (size_t shard = 0; shard < num_shards(); ++shard)
    group_of_size.emplace(std::pair{size_of(shard).height, size_of(shard).width}, group_of_size.size());
  if (group_of_size.size() <= 1) return {};
  std::vector<int64_t> groups;
  groups.reserve(static_cast<size_t>(size()));
  for (size_t shard = 0; shard < num_shards(); ++shard) {
    const int64_t g = group_of_size.at({size_of(shard).height, size_of(shard).width});
    groups.insert(groups.end(), static_cast<size_t>(manifest().shards[shard].samples), g);
  }
  return groups;
}

}  // namespace zest
