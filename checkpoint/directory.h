// The checkpoint folder protocol: names (step_NNNNNNNN/, rank_NNNNN.safetensors, latest), the commit
// of a finished step_N.tmp/ (rename + fsync + atomic `latest`), keep-last-K retention and finding the
// newest committed checkpoint. Only rank 0 changes the folder; see docs/checkpoint_format.md.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace zest::checkpoint {

inline constexpr const char* kManifestName = "manifest.json";
inline constexpr const char* kLatestName = "latest";

std::string step_dir_name(int64_t step);  // "step_00001000"
std::string rank_file_name(int rank);     // "rank_00000.safetensors"
// The step of a committed folder name ("step_00001000" → 1000); nullopt for anything else (.tmp, .del).
std::optional<int64_t> parse_step_dir_name(const std::string& name);

// Committed checkpoints under `root` (folders step_N holding a manifest), by increasing step.
struct CheckpointEntry {
  int64_t step = 0;
  std::string path;
};
std::vector<CheckpointEntry> list_checkpoints(const std::string& root);

// The checkpoint `latest` names. While a save replaces a folder of the same step, that step's previous
// contents are in step_N.old/, which is then returned. When `latest` is absent or names no committed
// folder (a crash between the first commit's rename and its `latest`, or a damaged file), the
// committed folder with the highest step. nullopt if there is none.
std::optional<std::string> find_latest(const std::string& root);

// What a user may name as a checkpoint: a step folder (DIR/step_N or any folder holding manifest.json),
// its manifest.json, a checkpoint root DIR, or DIR/latest (the same as DIR).
struct CheckpointLocation {
  std::string step_dir;  // the folder holding manifest.json
  std::string root;      // the root whose step folders it is among; "" for a lone step folder
  std::string note;      // why `latest` was not followed as written ("" when it was, or not involved)
};
// Errors say what was looked for.
CheckpointLocation locate_checkpoint(const std::string& path);
inline std::string resolve_checkpoint(const std::string& path) { return locate_checkpoint(path).step_dir; }

// Writes `text` to `path` (created or truncated) and fsyncs it; the caller renames it into place.
void write_file_synced(const std::string& path, const std::string& text);

// ---- rank 0's side of a save (the other ranks only write into the .tmp folder) ----

// Creates root/step_N.tmp/ (empty) after cleaning up after interrupted saves: *.tmp and *.del folders are
// removed; a step_M.old/ (an interrupted replacement) is renamed back to step_M/ when step_M/ is
// missing, and removed otherwise. Returns the new folder's path.
std::string prepare_tmp_dir(const std::string& root, int64_t step);
// Makes step_N.tmp/ the committed step_N/ and points `latest` at it, durably: fsync the folder, rename
// (an existing step_N/ is first renamed step_N.old/, which find_latest() serves until the new one is in
// place), fsync root, write latest.tmp + fsync, rename, fsync root, then remove step_N.old/.
// Returns the committed path.
std::string commit_tmp_dir(const std::string& root, int64_t step);
// Deletes committed checkpoints beyond the newest `keep_last` at or below the latest one (0 = keep
// all). Each is renamed to *.del first, so a crash mid-deletion never leaves a half folder that
// looks committed. Returns the deleted paths.
std::vector<std::string> apply_retention(const std::string& root, int keep_last);

}  // namespace zest::checkpoint
