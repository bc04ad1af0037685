// Checking a checkpoint's rank files against the manifest: presence, size, header (identity and
// tensors, rank_file.h) and optionally the xxh64 checksum; and the whole report that
// `zest ckpt inspect [--verify]` prints. Load checks its share of the files with the same function.
#pragma once

#include "checkpoint/directory.h"
#include "checkpoint/manifest.h"

#include <cstdint>
#include <string>
#include <vector>

namespace zest::checkpoint {

struct FileStatus {
  std::string path;
  bool exists = false;        // something is at the path
  bool regular = false;       // ... and it is a regular file
  uint64_t bytes = 0;         // actual size (0 when missing)
  bool size_ok = false;
  std::string header_problem; // checked when the size is right; "" when the header matches the manifest
  bool hashed = false;        // the checksum was computed
  bool checksum_ok = false;   // valid when hashed
  uint64_t xxh64 = 0;         // actual checksum, valid when hashed

  bool ok() const { return regular && size_ok && header_problem.empty() && (!hashed || checksum_ok); }
  // A sentence naming the file and what is wrong ("" when ok).
  std::string problem(const FileRecord& expected) const;
};

// Rank `rank`'s file of the checkpoint in `step_dir` (described by `manifest`). hash = false: presence,
// size and header only (cheap); hash = true also reads the whole file for its checksum.
FileStatus check_rank_file(const std::string& step_dir, const Manifest& manifest, int rank, bool hash);

// Everything `zest ckpt inspect` reports. Throws when the checkpoint cannot be found or its manifest is
// unreadable or invalid; file problems are in `files`.
struct CheckpointReport {
  CheckpointLocation location;
  Manifest manifest;
  std::vector<FileStatus> files;  // one per rank
  bool ok() const;                // every file ok
};
CheckpointReport inspect_checkpoint(const std::string& path, bool hash);

}  // namespace zest::checkpoint
