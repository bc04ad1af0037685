// Checkpoint folder protocol (see directory.h): naming, commit, retention, latest.
#include "checkpoint/directory.h"

#include "checkpoint/safetensors.h"
#include "core/check.h"

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

bool has_suffix(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

void rename_or_fail(const fs::path& from, const fs::path& to) {
  ZEST_CHECK(std::rename(from.c_str(), to.c_str()) == 0, "cannot rename ", from.string(), " to ", to.string(),
             ": ", std::strerror(errno));
}

bool is_committed(const fs::path& dir) { return fs::is_regular_file(dir / kManifestName); }

}  // namespace

void write_file_synced(const std::string& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ZEST_CHECK(fd >= 0, path, ": cannot create: ", std::strerror(errno));
  size_t done = 0;
  bool ok = true;
  while (ok && done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    ok = n > 0;
    if (ok) done += static_cast<size_t>(n);
  }
  ok = ok && ::fsync(fd) == 0;
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

std::optional<std::string> find_latest(const std::string& root) {
  const fs::path latest = fs::path(root) / kLatestName;
  std::ifstream in(latest);
  std::string name;
  if (in && std::getline(in, name) && parse_step_dir_name(name) && is_committed(fs::path(root) / name)) {
    return (fs::path(root) / name).string();
  }
  const auto all = list_checkpoints(root);
  if (all.empty()) return std::nullopt;
  return all.back().path;
}

std::string resolve_checkpoint(const std::string& dir_or_root) {
  ZEST_CHECK(fs::is_directory(dir_or_root), dir_or_root, ": no such checkpoint folder");
  if (fs::exists(fs::path(dir_or_root) / kManifestName)) return dir_or_root;
  const auto latest = find_latest(dir_or_root);
  ZEST_CHECK(latest.has_value(), dir_or_root, ": holds no committed checkpoint (no ", kManifestName,
             ", no `latest` and no step_N/ folder with a manifest)");
  return *latest;
}

std::string prepare_tmp_dir(const std::string& root, int64_t step) {
  fs::create_directories(root);
  for (const auto& entry : fs::directory_iterator(root)) {
    const std::string name = entry.path().filename().string();
    const bool leftover = name.rfind(kStepPrefix, 0) == 0 && (has_suffix(name, ".tmp") || has_suffix(name, ".del"));
    if (leftover && entry.is_directory()) fs::remove_all(entry.path());
  }
  const fs::path tmp = fs::path(root) / (step_dir_name(step) + ".tmp");
  fs::create_directory(tmp);
  return tmp.string();
}

std::string commit_tmp_dir(const std::string& root, int64_t step) {
  const fs::path final_dir = fs::path(root) / step_dir_name(step);
  const fs::path tmp = fs::path(root) / (step_dir_name(step) + ".tmp");
  safetensors::fsync_dir(tmp.string());
  const fs::path replaced = fs::path(root) / (step_dir_name(step) + ".del");
  const bool replacing = fs::exists(final_dir);
  if (replacing) rename_or_fail(final_dir, replaced);  // same step saved again (a resumed older run)
  rename_or_fail(tmp, final_dir);
  safetensors::fsync_dir(root);
  const fs::path latest_tmp = fs::path(root) / (std::string(kLatestName) + ".tmp");
  write_file_synced(latest_tmp.string(), step_dir_name(step) + "\n");
  rename_or_fail(latest_tmp, fs::path(root) / kLatestName);
  safetensors::fsync_dir(root);
  if (replacing) fs::remove_all(replaced);
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
    const fs::path doomed = dir.string() + ".del";
    rename_or_fail(dir, doomed);
    fs::remove_all(doomed);
    deleted.push_back(dir.string());
  }
  if (!deleted.empty()) safetensors::fsync_dir(root);
  return deleted;
}

}  // namespace zest::checkpoint
