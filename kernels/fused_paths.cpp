// The process-wide record of fused-path decisions (see fused_paths.h): a short list under a mutex, since a
// step makes a few hundred decisions at most and they are made on the host ahead of the GPU.
#include "kernels/fused_paths.h"

#include <mutex>

namespace zest {
namespace {

struct PathRecord {
  std::mutex mutex;
  std::vector<FusedPathUse> uses;
};

PathRecord& record() {
  static PathRecord r;
  return r;
}

}  // namespace

void note_fused_path(std::string_view path, bool taken, std::string_view why_not) {
  PathRecord& r = record();
  const std::lock_guard<std::mutex> lock(r.mutex);
  FusedPathUse* use = nullptr;
  for (auto& u : r.uses) {
    if (u.path == path) use = &u;
  }
  if (use == nullptr) use = &r.uses.emplace_back(FusedPathUse{std::string(path), 0, 0, {}});
  if (taken) {
    ++use->taken;
  } else {
    ++use->fell_back;
    if (use->why_not.empty()) use->why_not = why_not.empty() ? "not covered" : std::string(why_not);
  }
}

std::vector<FusedPathUse> fused_path_uses() {
  PathRecord& r = record();
  const std::lock_guard<std::mutex> lock(r.mutex);
  return r.uses;
}

void reset_fused_path_uses() {
  PathRecord& r = record();
  const std::lock_guard<std::mutex> lock(r.mutex);
  r.uses.clear();
}

std::vector<std::string> fused_path_fallback_lines() {
  std::vector<std::string> lines;
  for (const auto& u : fused_path_uses()) {
    if (u.fell_back == 0) continue;
    lines.push_back("fused path " + u.path + " not used (" + std::to_string(u.fell_back) + " of " +
                    std::to_string(u.taken + u.fell_back) + " coverage checks): " + u.why_not);
  }
  return lines;
}

}  // namespace zest
