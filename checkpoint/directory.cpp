// Checkpoint folder protocol (see directory.h): naming, commit, retention, latest.
#include "checkpoint/directory.h"

#include "formats/safetensors.h"
#include "checkpoint/save_phase.h"
#include "core/check.h"
#include "core/fd_write.h"
#include "core/untrusted_file.h"
#include "formats/input_limits.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <fcntl.h>
#include <unistd.h>

namespace zest::checkpoint {
namespace fs = std::filesystem;

namespace {

constexpr const char* kStepPrefix = "step_";
constexpr const char* kOldSuffix = ".old";       // a committed folder being replaced by the same step
constexpr const char* kDeletingSuffix = ".del";  // a folder being removed

bool has_suffix(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

void rename_or_fail(const fs::path& from, const fs::path& to) {
  ZEST_CHECK(std::rename(from.c_str(), to.c_str()) == 0, "cannot rename ", from.string(), " to ", to.string(),
             ": ", std::strerror(errno));
}

bool is_committed(const fs::path& dir) {
  std::error_code ec;
  return fs::is_directory(dir, ec) && fs::is_regular_file(dir / kManifestName, ec);
}

// Renamed to *.del first, so that a crash during the removal never leaves a half folder under a name
// that looks committed (or restorable).
void remove_folder(const fs::path& dir) {
  const fs::path doomed = dir.string() + kDeletingSuffix;
  rename_or_fail(dir, doomed);
  fs::remove_all(doomed);
}

}  // namespace

void write_file_synced(const std::string& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ZEST_CHECK(fd >= 0, path, ": cannot create: ", std::strerror(errno));
  const bool ok = write_all(fd, text) && ::fsync(fd) == 0;
  const std::string error = ok ? "" : std::strerror(errno);
  ::close(fd);
  ZEST_CHECK(ok, path, ": write/fsync failed: ", error);
}

std::string step_dir_name(int64_t step) {
  ZEST_CHECK(step >= 0, "checkpoint step must be >= 0, got ", step);
  char name[32];
  std::snprintf(name, sizeof(name), "step_%08lld", static_cast<long long>(step));
  return name;
}

std::string rank_file_name(int rank) {
  char name[40];
  std::snprintf(name, sizeof(name), "rank_%05d.safetensors", rank);
  return name;
}

std::optional<int64_t> parse_step_dir_name(const std::string& name) {
  const std::string prefix = kStepPrefix;
  if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) return std::nullopt;
  const std::string digits = name.substr(prefix.size());
  if (digits.size() > 18 || digits.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  return std::stoll(digits);
}

std::vector<CheckpointEntry> list_checkpoints(const std::string& root) {
  std::vector<CheckpointEntry> out;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return out;
  for (const auto& entry : fs::directory_iterator(root)) {
    const auto step = parse_step_dir_name(entry.path().filename().string());
    if (step && entry.is_directory() && is_committed(entry.path())) out.push_back({*step, entry.path().string()});
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.step < b.step; });
  return out;
}

namespace {

struct LatestChoice {
  std::optional<std::string> path;
  std::string note;  // set when `latest` was not followed as written
};

// The folder name `latest` holds (its first line), or "" when it is absent, not a regular file, larger
// than a folder name can be, or unreadable (`problem` then says which, for the note).
std::string read_latest_name(const fs::path& latest, std::string& problem) {
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(latest, ec))) return "";
  try {
    const std::string text = read_text_file(latest.string(), "`latest` file", kMaxLatestBytes);
    return text.substr(0, text.find('\n'));
  } catch (const Error& e) {
    problem = e.what();
    return "";
  }
}

LatestChoice choose_latest(const std::string& root) {
  const fs::path latest = fs::path(root) / kLatestName;
  std::string problem;
  const std::string name = read_latest_name(latest, problem);
  if (parse_step_dir_name(name)) {
    if (is_committed(fs::path(root) / name)) return {(fs::path(root) / name).string(), ""};
    const fs::path old = fs::path(root) / (name + kOldSuffix);
    if (is_committed(old)) return {old.string(), ""};  // a save of the same step was replacing it
  }
  const auto all = list_checkpoints(root);
  if (all.empty()) return {std::nullopt, ""};
  std::error_code ec;
  const std::string why = !fs::exists(fs::symlink_status(latest, ec)) ? printable(latest.string()) + " does not exist"
                          : !problem.empty()                             ? problem
                                                                         : printable(latest.string()) + " names '" +
                                                                               printable(name, 80) +
                                                                               "', which is not a committed checkpoint";
  return {all.back().path, why + "; using " + printable(all.back().path) + ", the newest committed checkpoint"};
}

// A root when `dir` holds a `latest` file (then its step folders are checkpoints of one run).
std::string root_of_step_dir(const fs::path& step_dir) {
  fs::path parent = fs::absolute(step_dir).lexically_normal();
  if (parent.filename().empty()) parent = parent.parent_path();
  parent = parent.parent_path();
  std::error_code ec;
  return fs::is_regular_file(parent / kLatestName, ec) ? parent.string() : "";
}

CheckpointLocation locate_in_root(const std::string& root) {
  const LatestChoice choice = choose_latest(root);
  ZEST_CHECK(choice.path.has_value(), root, ": holds no committed checkpoint (no ", kManifestName,
             ", no `latest` and no step_N/ folder with a manifest)");
  return {*choice.path, root, choice.note};
}

}  // namespace

std::optional<std::string> find_latest(const std::string& root) { return choose_latest(root).path; }

CheckpointLocation locate_checkpoint(const std::string& path) {
  ZEST_CHECK(!path.empty(), "no checkpoint folder given");
  const fs::path p(path);
  std::error_code ec;
  const fs::file_status status = fs::status(p, ec);
  ZEST_CHECK(fs::exists(status), path, ": no such checkpoint folder");
  if (fs::is_regular_file(status)) {
    const fs::path parent = p.parent_path().empty() ? fs::path(".") : p.parent_path();
    if (p.filename() == kLatestName) return locate_in_root(parent.string());
    if (p.filename() == kManifestName) return {parent.string(), root_of_step_dir(parent), ""};
    ZEST_FAIL(path, ": is a file, not a checkpoint; give a checkpoint folder (DIR or DIR/step_N) or DIR/",
              kLatestName);
  }
  ZEST_CHECK(fs::is_directory(status), path, ": is not a folder or a file; give a checkpoint folder");
  if (is_committed(p)) return {path, root_of_step_dir(p), ""};
  return locate_in_root(path);
}

std::string prepare_tmp_dir(const std::string& root, int64_t step) {
  fs::create_directories(root);
  for (const auto& entry : fs::directory_iterator(root)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(kStepPrefix, 0) != 0 || !entry.is_directory()) continue;
    if (has_suffix(name, ".tmp") || has_suffix(name, kDeletingSuffix)) fs::remove_all(entry.path());
    if (!has_suffix(name, kOldSuffix)) continue;
    // An interrupted replacement: the previous contents come back unless the new folder is in place.
    const fs::path replaced = fs::path(root) / name.substr(0, name.size() - std::strlen(kOldSuffix));
    if (!fs::exists(replaced) && is_committed(entry.path())) {
      rename_or_fail(entry.path(), replaced);
    } else {
      fs::remove_all(entry.path());
    }
  }
  const fs::path tmp = fs::path(root) / (step_dir_name(step) + ".tmp");
  fs::create_directory(tmp);
  reach_save_phase(SavePhase::tmp_created, 0, step);
  return tmp.string();
}

std::string commit_tmp_dir(const std::string& root, int64_t step) {
  const fs::path final_dir = fs::path(root) / step_dir_name(step);
  const fs::path tmp = fs::path(root) / (step_dir_name(step) + ".tmp");
  const fs::path old = fs::path(root) / (step_dir_name(step) + kOldSuffix);
  safetensors::fsync_dir(tmp.string());
  const bool replacing = fs::exists(final_dir);  // the same step saved again (a resumed older run)
  if (replacing) {
    rename_or_fail(final_dir, old);
    reach_save_phase(SavePhase::old_step_moved, 0, step);
  }
  rename_or_fail(tmp, final_dir);
  safetensors::fsync_dir(root);
  reach_save_phase(SavePhase::step_renamed, 0, step);
  const fs::path latest_tmp = fs::path(root) / (std::string(kLatestName) + ".tmp");
  write_file_synced(latest_tmp.string(), step_dir_name(step) + "\n");
  reach_save_phase(SavePhase::latest_tmp_written, 0, step);
  rename_or_fail(latest_tmp, fs::path(root) / kLatestName);
  safetensors::fsync_dir(root);
  reach_save_phase(SavePhase::latest_renamed, 0, step);
  if (replacing) remove_folder(old);
  return final_dir.string();
}

std::vector<std::string> apply_retention(const std::string& root, int keep_last) {
  std::vector<std::string> deleted;
  if (keep_last <= 0) return deleted;
  const auto latest = find_latest(root);
  if (!latest) return deleted;
  const int64_t latest_step = *parse_step_dir_name(fs::path(*latest).filename().string());
  std::vector<CheckpointEntry> candidates;  // at or below latest: newer ones are not ours to judge
  for (auto& entry : list_checkpoints(root))
    if (entry.step <= latest_step) candidates.push_back(std::move(entry));
  const auto excess = static_cast<int64_t>(candidates.size()) - keep_last;
  for (int64_t i = 0; i < excess; ++i) {
    const fs::path dir = candidates[i].path;
    const fs::path doomed = dir.string() + kDeletingSuffix;
    rename_or_fail(dir, doomed);
    reach_save_phase(SavePhase::retention_moved, 0, latest_step);
    fs::remove_all(doomed);
    deleted.push_back(dir.string());
  }
  if (!deleted.empty()) safetensors::fsync_dir(root);
  return deleted;
}

}  // namespace zest::checkpoint
