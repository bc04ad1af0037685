// Rank file checks against the manifest (see verify.h).
#include "checkpoint/verify.h"

#include "checkpoint/checksum.h"
#include "checkpoint/rank_file.h"
#include "formats/safetensors.h"
#include "core/check.h"

#include <filesystem>

namespace zest::checkpoint {
namespace fs = std::filesystem;

FileStatus check_rank_file(const std::string& step_dir, const Manifest& manifest, int rank, bool hash) {
  const FileRecord& expected = manifest.files.at(static_cast<size_t>(rank));
  FileStatus status;
  status.path = (fs::path(step_dir) / expected.name).string();
  std::error_code ec;
  const fs::file_status type = fs::symlink_status(status.path, ec);
  status.exists = !ec && fs::exists(type);
  status.regular = status.exists && fs::is_regular_file(type);
  if (!status.regular) return status;
  status.bytes = fs::file_size(status.path, ec);
  status.size_ok = !ec && status.bytes == expected.bytes;
  if (!status.size_ok) return status;
  try {
    status.header_problem = rank_file_mismatch(safetensors::Reader(status.path), manifest, rank);
  } catch (const std::exception& e) {  // not a readable safetensors file
    status.header_problem = e.what();
  }
  if (!status.header_problem.empty()) return status;
  if (hash) {
    status.hashed = true;
    status.xxh64 = xxh64_file(status.path);
    status.checksum_ok = status.xxh64 == expected.xxh64;
  }
  return status;
}

std::string FileStatus::problem(const FileRecord& expected) const {
  if (!exists) return str(path, ": rank file is missing (the manifest lists it; the checkpoint is incomplete)");
  if (!regular) return str(path, ": is not a regular file (the manifest lists a rank file here)");
  if (!size_ok)
    return str(path, ": size is ", bytes, " bytes but the manifest says ", expected.bytes,
               " (truncated, overwritten or from another checkpoint)");
  if (!header_problem.empty()) return header_problem;
  if (hashed && !checksum_ok)
    return str(path, ": xxh64 checksum is ", to_hex(xxh64), " but the manifest says ", to_hex(expected.xxh64),
               " (the file is corrupt)");
  return "";
}

bool CheckpointReport::ok() const {
  for (const FileStatus& f : files)
    if (!f.ok()) return false;
  return true;
}

CheckpointReport inspect_checkpoint(const std::string& path, bool hash) {
  CheckpointReport report;
  report.location = locate_checkpoint(path);
  report.manifest = read_manifest(report.location.step_dir);
  for (int r = 0; r < report.manifest.world_size; ++r)
    report.files.push_back(check_rank_file(report.location.step_dir, report.manifest, r, hash));
  return report;
}

}  // namespace zest::checkpoint
