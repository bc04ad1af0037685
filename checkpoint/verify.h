// Checking a checkpoint's rank files against the manifest: presence, size and (optionally) the
// xxh64 checksum. Used by load (before any state changes) and `zest ckpt inspect --verify`.
#pragma once

#include "checkpoint/manifest.h"

#include <cstdint>
#include <string>

namespace zest::checkpoint {

struct FileStatus {
  std::string path;
  bool exists = false;
  uint64_t bytes = 0;         // actual size (0 when missing)
  bool size_ok = false;
  bool hashed = false;        // the checksum was computed
  bool checksum_ok = false;   // valid when hashed
  uint64_t xxh64 = 0;         // actual checksum, valid when hashed

  bool ok() const { return exists && size_ok && (!hashed || checksum_ok); }
  // A sentence naming the file and what is wrong ("" when ok).
  std::string problem(const FileRecord& expected) const;
};

// hash = false checks presence and size only (a stat); the checksum reads the whole file.
FileStatus check_file(const std::string& step_dir, const FileRecord& expected, bool hash);

}  // namespace zest::checkpoint
