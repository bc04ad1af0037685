// The run's folders before any training step: checkpoint.dir is checked (a folder, writable) and a
// fresh start is refused where it would mix with another run's checkpoints, then train.run_dir gets
// config.toml. Everything here fails at start, with the key to change, rather than at the first save.
#pragma once

#include "comm/communicator.h"
#include "train/run_config.h"
#include "train/run_lock.h"

#include <string>

namespace zest {

// Writes `text` to `path` through `path.tmp` and a rename, so a failure never leaves a half file in
// place of a good one; every failure (a full disk included) is an error naming the file.
void write_file_atomically(const std::string& path, const std::string& text);

// Creates `dir` when missing and proves that files can be created in it (a probe file is written and
// removed). `key` names the setting in errors, e.g. "checkpoint.dir".
void ensure_writable_dir(const std::string& dir, const std::string& key);

// A fresh start (--no-resume) into a checkpoint.dir that already holds committed checkpoints is refused:
// its saves would replace theirs step by step and leave the others beside its `latest`.
void refuse_fresh_start_over_checkpoints(const RunConfig& config);

// Collective. Rank 0 checks checkpoint.dir and train.run_dir, takes the run folder's lock (run_lock.h:
// a second run on the folder is refused here), applies the rule above when `resume` is false, and writes
// RUN_DIR/config.toml (last, so a refused run leaves the folder as it was); the other ranks wait for it.
// The returned lock must live as long as the run (it holds nothing on other ranks).
[[nodiscard]] RunLock prepare_run_folders(const RunConfig& config, bool resume, Communicator& comm);

}  // namespace zest
