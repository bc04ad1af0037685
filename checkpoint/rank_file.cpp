// Rank file identity and header agreement with the manifest (see rank_file.h).
#include "checkpoint/rank_file.h"

#include "core/check.h"

#include <set>

namespace zest::checkpoint {
namespace {

// The header's value for `key`, or "" when absent.
std::string meta(const safetensors::Metadata& metadata, const std::string& key) {
  const auto it = metadata.find(key);
  return it == metadata.end() ? "" : it->second;
}

void check_identity(const safetensors::Metadata& metadata, const Manifest& m, int rank,
                    std::vector<std::string>& problems) {
  if (meta(metadata, "format") != kFormatName) {
    problems.push_back(str("its header does not say format '", kFormatName,
                           "' (not a zest rank file, or its header is damaged)"));
    return;
  }
  const std::string file_rank = meta(metadata, "rank");
  const std::string file_world = meta(metadata, "world_size");
  const std::string file_step = meta(metadata, "step");
  const std::string written = "its header says rank " + file_rank + " of " + file_world + " at step " + file_step;
  if (file_rank != std::to_string(rank))
    problems.push_back(written + ", but this is rank " + std::to_string(rank) +
                       "'s position: rank files swapped, renamed or copied?");
  if (file_world != std::to_string(m.world_size))
    problems.push_back(written + ", but the checkpoint was saved by " + std::to_string(m.world_size) +
                       " rank(s): a rank file from another checkpoint?");
  if (file_step != std::to_string(m.step))
    problems.push_back(written + ", but the manifest is step " + std::to_string(m.step) +
                       ": a rank file copied from another checkpoint?");
}

void check_tensors(const safetensors::Reader& file, const Manifest& m, std::vector<std::string>& problems) {
  std::set<std::string> expected;
  for (const std::string& kind : m.kinds) {
    for (const UnitLayout& unit : m.units) {
      const std::string name = tensor_name(kind, unit.name);
      expected.insert(name);
      if (!file.contains(name)) {
        problems.push_back("lacks tensor '" + name + "' that the manifest lists");
        continue;
      }
      const safetensors::TensorInfo& info = file.info(name);
      if (info.dtype != torch::kFloat32 || info.shape != std::vector<int64_t>{unit.shard_numel()})
        problems.push_back(str("tensor '", name, "' is ", safetensors::dtype_name(info.dtype), " with ",
                               info.numel(), " elements in ", info.shape.size(), " dim(s); the manifest says F32 [",
                               unit.shard_numel(), "]"));
    }
  }
  for (const safetensors::TensorInfo& info : file.tensors())
    if (!expected.count(info.name))
      problems.push_back("holds tensor '" + info.name + "' that the manifest does not list");
}

}  // namespace

safetensors::Metadata rank_file_metadata(const RankFileIdentity& id) {
  return {{"format", kFormatName},
          {"format_version", std::to_string(kFormatVersion)},
          {"rank", std::to_string(id.rank)},
          {"world_size", std::to_string(id.world_size)},
          {"step", std::to_string(id.step)}};
}

std::vector<std::string> rank_file_problems(const safetensors::Reader& file, const Manifest& m, int rank) {
  std::vector<std::string> problems;
  check_identity(file.metadata(), m, rank, problems);
  check_tensors(file, m, problems);
  return problems;
}

std::string rank_file_mismatch(const safetensors::Reader& file, const Manifest& m, int rank) {
  const auto problems = rank_file_problems(file, m, rank);
  if (problems.empty()) return "";
  constexpr size_t kShown = 3;
  std::string message = file.path() + ": does not match the checkpoint manifest: ";
  for (size_t i = 0; i < problems.size() && i < kShown; ++i) message += (i ? "; " : "") + problems[i];
  if (problems.size() > kShown) message += "; and " + std::to_string(problems.size() - kShown) + " more";
  return message;
}

void check_rank_file_header(const safetensors::Reader& file, const Manifest& m, int rank) {
  const std::string mismatch = rank_file_mismatch(file, m, rank);
  ZEST_CHECK(mismatch.empty(), mismatch);
}

}  // namespace zest::checkpoint
