// Range reads across rank files (see shard_reader.h).
#include "checkpoint/shard_reader.h"

#include "core/check.h"

#include <algorithm>
#include <filesystem>

namespace zest::checkpoint {

ShardReader::ShardReader(std::string step_dir, const Manifest& manifest)
    : dir_(std::move(step_dir)), manifest_(manifest) {}

const safetensors::Reader& ShardReader::reader(int rank) {
  auto it = readers_.find(rank);
  if (it != readers_.end()) return *it->second;
  const std::string path = (std::filesystem::path(dir_) / manifest_.files.at(rank).name).string();
  ZEST_CHECK(std::filesystem::exists(path), path, ": rank file missing (the checkpoint was saved by ",
             manifest_.world_size, " ranks)");
  auto opened = std::make_unique<safetensors::Reader>(path);
  // The header must hold exactly what the manifest promises before any byte is trusted.
  for (const std::string& kind : manifest_.kinds) {
    for (const UnitLayout& unit : manifest_.units) {
      const std::string name = tensor_name(kind, unit.name);
      const safetensors::TensorInfo& info = opened->info(name);
      ZEST_CHECK(info.dtype == torch::kFloat32 && info.shape == std::vector<int64_t>{unit.shard_numel()}, path,
                 ": tensor '", name, "' should be F32 [", unit.shard_numel(), "] per the manifest, got ",
                 safetensors::dtype_name(info.dtype), " with ", info.numel(), " elements");
    }
  }
  return *readers_.emplace(rank, std::move(opened)).first->second;
}

void ShardReader::read(const std::string& kind, size_t unit_idx, int64_t begin, int64_t numel, float* dst) {
  const UnitLayout& unit = manifest_.units.at(unit_idx);
  ZEST_CHECK(begin >= 0 && numel >= 0 && begin + numel <= unit.padded_numel, "unit ", unit.name, ": range [",
             begin, ", ", begin + numel, ") outside its ", unit.padded_numel, " elements");
  const int64_t shard = unit.shard_numel();
  const std::string name = tensor_name(kind, unit.name);
  while (numel > 0) {
    const auto rank = static_cast<int>(begin / shard);
    const int64_t within = begin - rank * shard;
    const int64_t take = std::min(numel, shard - within);
    reader(rank).read_bytes(name, static_cast<uint64_t>(within) * 4, static_cast<uint64_t>(take) * 4, dst);
    begin += take;
    numel -= take;
    dst += take;
  }
}

std::vector<int> ShardReader::opened_ranks() const {
  std::vector<int> ranks;
  for (const auto& [rank, reader] : readers_) ranks.push_back(rank);
  return ranks;
}

}  // namespace zest::checkpoint
