// Helpers of the launcher tests: run the built `zest` (or this test binary) as a child process,
// capture its combined output, its exit status and how long it took.
#pragma once

#include "common/spawned_process.h"
#include "common/zest_binary.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

namespace zest::testing {

inline std::string self_binary() {
  char path[4096];
  const ssize_t n = ::readlink("/proc/self/exe", path, sizeof(path) - 1);
  return n > 0 ? std::string(path, static_cast<size_t>(n)) : std::string();
}

// A running child with stdout+stderr on one pipe.
class Child {
 public:
  explicit Child(const std::vector<std::string>& argv, const std::vector<std::string>& env = {}) {
    start_ = std::chrono::steady_clock::now();
    const SpawnedProcess spawned = spawn_process(argv, env, /*own_group=*/false);
    pid_ = spawned.pid;
    fd_ = spawned.output_fd;
  }
  ~Child() {
    if (pid_ > 0 && !waited_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (fd_ >= 0) ::close(fd_);
  }

  // Reads until `text` has appeared in the output (or EOF); true if it did.
  bool read_until(const std::string& text) {
    while (output_.find(text) == std::string::npos) {
      if (!read_some()) return false;
    }
    return true;
  }
  // Reads to EOF and reaps; returns the raw wait status.
  int finish() {
    while (read_some()) {
    }
    int status = 0;
    ::waitpid(pid_, &status, 0);
    waited_ = true;
    elapsed_ = std::chrono::steady_clock::now() - start_;
    return status;
  }
  pid_t pid() const { return pid_; }
  const std::string& output() const { return output_; }
  double seconds() const { return elapsed_.count(); }

 private:
  bool read_some() {
    char buffer[4096];
    const ssize_t n = ::read(fd_, buffer, sizeof(buffer));
    if (n <= 0) return false;
    output_.append(buffer, static_cast<size_t>(n));
    return true;
  }

  pid_t pid_ = -1;
  int fd_ = -1;
  bool waited_ = false;
  std::string output_;
  std::chrono::steady_clock::time_point start_;
  std::chrono::duration<double> elapsed_{0};
};

}  // namespace zest::testing
