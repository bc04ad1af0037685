// One `zest train` per run folder: rank 0 holds an exclusive flock on RUN_DIR/.zest-run.lock for the
// whole run. The kernel releases it when the process ends however it ends (kill -9 included), so a lock
// file left by a dead run never blocks; a live one makes a second run refuse at once, naming its pid.
#pragma once

#include <string>

namespace zest {

class RunLock {
 public:
  RunLock() = default;  // holds nothing (ranks other than 0)
  // Takes the lock of `run_dir` (which must exist) or throws zest::Error naming the process holding it.
  explicit RunLock(const std::string& run_dir);
  ~RunLock();
  RunLock(RunLock&& other) noexcept;
  RunLock& operator=(RunLock&& other) noexcept;
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;

  bool is_held() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

inline constexpr const char* kRunLockName = ".zest-run.lock";

}  // namespace zest
