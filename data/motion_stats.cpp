// Motion normalisation statistics: float64 accumulation over the shards, and the stats file.
#include "data/motion_stats.h"

#include "formats/safetensors.h"
#include "core/check.h"
#include "core/untrusted_file.h"

#include <charconv>

#include <filesystem>

namespace zest {

MotionStats compute_motion_stats(const std::string& dir, const DatasetManifest& manifest) {
  ZEST_CHECK(manifest.format == DatasetFormat::motion, dir, ": normalisation statistics are for motion datasets");
  const int64_t dim = manifest.feature("motion_dim");
  auto sum = torch::zeros({dim}, torch::kFloat64);
  auto sum_sq = torch::zeros({dim}, torch::kFloat64);
  int64_t frames = 0;
  constexpr int64_t kChunkFrames = 65536;
  for (const ShardEntry& shard : manifest.shards) {
    const safetensors::Reader reader(manifest.shard_path(dir, static_cast<size_t>(&shard - manifest.shards.data())));
    const safetensors::TensorInfo& info = reader.info("motion");
    ZEST_CHECK(info.shape.size() == 2 && info.shape[1] == dim, reader.path(), ": wrong feature width: tensor "
               "'motion' should be [frames, ", dim, "] (features.motion_dim)");
    for (int64_t begin = 0; begin < info.shape[0]; begin += kChunkFrames) {
      const int64_t rows = std::min(kChunkFrames, info.shape[0] - begin);
      const auto x = reader.read_flat_range("motion", begin * dim, rows * dim).view({rows, dim}).to(torch::kFloat64);
      sum += x.sum(0);
      sum_sq += x.square().sum(0);
    }
    frames += info.shape[0];
  }
  ZEST_CHECK(frames > 0, dir, ": the dataset has no motion frames");
  const auto mean = sum / static_cast<double>(frames);
  const auto var = (sum_sq / static_cast<double>(frames) - mean.square()).clamp_min(0.0);
  return {mean.to(torch::kFloat32), var.sqrt().clamp_min(kMotionStdFloor).to(torch::kFloat32), frames};
}

void write_motion_stats(const std::string& path, const MotionStats& stats) {
  safetensors::save_file(path, {{"mean", stats.mean.to(torch::kFloat32)}, {"std", stats.std.to(torch::kFloat32)}},
                         {{"frames", std::to_string(stats.frames)}, {"format", "zest.motion.stats.v1"}});
}

MotionStats read_motion_stats(const std::string& path, int64_t motion_dim) {
  ZEST_CHECK(std::filesystem::is_regular_file(path), path, ": normalisation statistics file not found "
             "(`zest data stats DIR` computes it)");
  const safetensors::Reader reader(path);
  MotionStats stats;
  for (const char* name : {"mean", "std"}) {
    ZEST_CHECK(reader.contains(name), path, ": missing tensor '", name, "'");
    const auto& info = reader.info(name);
    ZEST_CHECK(info.shape == std::vector<int64_t>{motion_dim}, path, ": wrong feature width: '", name,
               "' must be [", motion_dim, "] (features.motion_dim)");
    auto t = reader.read(name).to(torch::kFloat32);
    ZEST_CHECK(torch::isfinite(t).all().item<bool>(), path, ": '", name, "' has non-finite values");
    (std::string(name) == "mean" ? stats.mean : stats.std) = t;
  }
  ZEST_CHECK((stats.std > 0).all().item<bool>(), path, ": 'std' must be > 0 for every feature");
  const auto it = reader.metadata().find("frames");
  if (it != reader.metadata().end()) {
    const auto [end, ec] = std::from_chars(it->second.data(), it->second.data() + it->second.size(), stats.frames);
    ZEST_CHECK(ec == std::errc() && end == it->second.data() + it->second.size() && stats.frames >= 0, path,
               ": __metadata__.frames = \"", printable(it->second, 40), "\" is not a frame count");
  }
  return stats;
}

}  // namespace zest
