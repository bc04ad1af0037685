// Locating and reading one sample's cached features (see sample_features.h).
#include "data/sample_features.h"

#include "core/check.h"
#include "core/untrusted_file.h"
#include "data/dataset_manifest.h"

#include <filesystem>

namespace zest {

SampleLocation locate_sample(const std::string& path, int64_t index) {
  if (!std::filesystem::is_directory(path)) return {path, index, ""};
  const DatasetManifest manifest = read_manifest(path);
  const std::string stats = manifest.stats_file.empty() ? "" : manifest.stats_path(path);  // inside the folder
  int64_t local = index;
  for (size_t i = 0; i < manifest.shards.size(); ++i) {
    if (local >= 0 && local < manifest.shards[i].samples) return {manifest.shard_path(path, i), local, stats};
    local -= manifest.shards[i].samples;
  }
  ZEST_FAIL(path, ": sample ", index, " is out of range (the dataset holds ", manifest.total_samples(), ")");
}

torch::Tensor read_sample(const safetensors::Reader& file, const std::string& key, int64_t index, int64_t sample_dims) {
  if (!file.contains(key)) {
    std::string names;
    for (const auto& info : file.tensors()) names += (names.empty() ? "" : ", ") + printable(info.name);
    ZEST_FAIL(file.path(), " has no tensor '", key, "' (it has: ", names, ")");
  }
  torch::Tensor t = file.read(key);
  if (t.dim() > sample_dims) {
    ZEST_CHECK(index >= 0 && index < t.size(0), file.path(), ": sample ", index, " is out of range for '", key,
               "' of shape ", t.sizes());
    t = t[index];
  }
  return t;
}

torch::Tensor reshape_checked(const torch::Tensor& t, torch::IntArrayRef shape, const std::string& what) {
  int64_t numel = 1;
  for (const int64_t d : shape) numel *= d;
  ZEST_CHECK(t.numel() == numel, what, " has shape ", t.sizes(), "; the model expects ", shape);
  return t.reshape(shape);
}

}  // namespace zest
