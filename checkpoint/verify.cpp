// Rank file checks against the manifest (see verify.h).
#include "checkpoint/verify.h"

#include "checkpoint/checksum.h"
#include "core/check.h"

#include <filesystem>

namespace zest::checkpoint {

FileStatus check_file(const std::string& step_dir, const FileRecord& expected, bool hash) {
  FileStatus status;
  status.path = (std::filesystem::path(step_dir) / expected.name).string();
  std::error_code ec;
  status.exists = std::filesystem::is_regular_file(status.path, ec);
  if (!status.exists) return status;
  status.bytes = std::filesystem::file_size(status.path, ec);
  status.size_ok = !ec && status.bytes == expected.bytes;
  if (status.size_ok && hash) {
    status.hashed = true;
    status.xxh64 = xxh64_file(status.path);
    status.checksum_ok = status.xxh64 == expected.xxh64;
  }
  return status;
}

std::string FileStatus::problem(const FileRecord& expected) const {
  if (!exists) return str(path, ": rank file is missing (the manifest lists it; the checkpoint is incomplete)");
  if (!size_ok)
    return str(path, ": size is ", bytes, " bytes but the manifest says ", expected.bytes,
               " (truncated or overwritten)");
  if (hashed && !checksum_ok)
    return str(path, ": xxh64 checksum is ", to_hex(xxh64), " but the manifest says ", to_hex(expected.xxh64),
               " (the file is corrupt)");
  return "";
}

}  // namespace zest::checkpoint
