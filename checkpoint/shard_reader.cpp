// Range reads across rank files, with optional streaming checksums (see shard_reader.h).
#include "checkpoint/shard_reader.h"

#include "checkpoint/rank_file.h"
#include "core/check.h"

#include <algorithm>
#include <filesystem>

namespace zest::checkpoint {
namespace {

constexpr size_t kScratchBytes = size_t{4} << 20;

}  // namespace

ShardReader::ShardReader(std::string step_dir, const Manifest& manifest, bool verify_checksums)
    : dir_(std::move(step_dir)), manifest_(manifest), verify_(verify_checksums) {}

ShardReader::~ShardReader() = default;

ShardReader::OpenFile& ShardReader::file(int rank) {
  auto it = files_.find(rank);
  if (it != files_.end()) return *it->second;
  const FileRecord& record = manifest_.files.at(static_cast<size_t>(rank));
  const std::string path = (std::filesystem::path(dir_) / record.name).string();
  std::error_code ec;
  ZEST_CHECK(std::filesystem::is_regular_file(path, ec), path, ": rank file missing (the checkpoint was saved by ",
             manifest_.world_size, " ranks)");
  auto opened = std::make_unique<OpenFile>(path);
  ZEST_CHECK(opened->reader.file_bytes() == record.bytes, path, ": size is ", opened->reader.file_bytes(),
             " bytes but the manifest says ", record.bytes, " (truncated, overwritten or from another checkpoint)");
  // The header must hold exactly what the manifest promises before any byte is trusted.
  check_rank_file_header(opened->reader, manifest_, rank);
  return *files_.emplace(rank, std::move(opened)).first->second;
}

void ShardReader::hash_up_to(OpenFile& f, uint64_t end) {
  if (f.hashed_to >= end) return;
  if (scratch_.empty()) scratch_.resize(kScratchBytes);
  while (f.hashed_to < end) {
    const uint64_t n = std::min<uint64_t>(end - f.hashed_to, scratch_.size());
    f.reader.read_file_range(f.hashed_to, n, scratch_.data());
    f.hash.update(scratch_.data(), n);
    f.hashed_to += n;
  }
}

void ShardReader::read_file_range(OpenFile& f, uint64_t offset, uint64_t nbytes, char* dst) {
  if (!verify_ || offset + nbytes <= f.hashed_to) {  // a second read of hashed bytes (a tied alias)
    f.reader.read_file_range(offset, nbytes, dst);
    return;
  }
  hash_up_to(f, offset);  // skipped bytes (header, padding, other kinds) are hashed on the way
  const uint64_t fresh = std::max(offset, f.hashed_to);
  if (fresh > offset) f.reader.read_file_range(offset, fresh - offset, dst);
  f.reader.read_file_range(fresh, offset + nbytes - fresh, dst + (fresh - offset));
  f.hash.update(dst + (fresh - offset), offset + nbytes - fresh);
  f.hashed_to = offset + nbytes;
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
    OpenFile& f = file(rank);
    const safetensors::TensorInfo& info = f.reader.info(name);
    const uint64_t offset = f.reader.data_start() + info.data_begin + static_cast<uint64_t>(within) * 4;
    read_file_range(f, offset, static_cast<uint64_t>(take) * 4, reinterpret_cast<char*>(dst));
    begin += take;
    numel -= take;
    dst += take;
  }
}

void ShardReader::finish_verification() {
  ZEST_CHECK(verify_, "ShardReader::finish_verification() without verify_checksums");
  std::string bad;
  int count = 0;
  for (int r = 0; r < manifest_.world_size; ++r) {
    OpenFile& f = file(r);
    hash_up_to(f, f.reader.file_bytes());
    const uint64_t expected = manifest_.files[static_cast<size_t>(r)].xxh64;
    if (f.hash.digest() == expected) continue;
    ++count;
    bad += "\n  - " + f.reader.path() + ": xxh64 is " + to_hex(f.hash.digest()) + ", the manifest says " +
           to_hex(expected);
  }
  ZEST_CHECK(count == 0, count, " rank file(s) are corrupt (checksum mismatch):", bad);
}

std::vector<int> ShardReader::opened_ranks() const {
  std::vector<int> ranks;
  for (const auto& [rank, f] : files_) ranks.push_back(rank);
  return ranks;
}

}  // namespace zest::checkpoint
