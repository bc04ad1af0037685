// The run-folder lock (see run_lock.h).
#include "train/run_lock.h"

#include "core/check.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <utility>

namespace zest {
namespace {

// What the holder wrote into the lock file: "pid P on HOST since TIME" (best effort, for the message).
std::string holder_of(int fd) {
  char text[256] = {};
  const ssize_t n = ::pread(fd, text, sizeof(text) - 1, 0);
  std::string holder = n > 0 ? std::string(text, static_cast<size_t>(n)) : std::string();
  while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
  for (char& c : holder)
    if (static_cast<unsigned char>(c) < 0x20) c = ' ';
  return holder.empty() ? "a process that has not written its pid yet" : holder;
}

std::string self_description() {
  char host[128] = {};
  ::gethostname(host, sizeof(host) - 1);
  const std::time_t now = std::time(nullptr);
  char when[64] = {};
  std::strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S UTC", std::gmtime(&now));
  return str("pid ", ::getpid(), " on ", host, " since ", when, "\n");
}

}  // namespace

RunLock::RunLock(const std::string& run_dir) {
  const std::string path = (std::filesystem::path(run_dir) / kRunLockName).string();
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd_ < 0)
    throw Error(str("train.run_dir '", run_dir, "': cannot open its lock file ", path, ": ", std::strerror(errno)));
  int rc = 0;
  do {
    rc = ::flock(fd_, LOCK_EX | LOCK_NB);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    const int error = errno;
    const std::string holder = error == EWOULDBLOCK ? holder_of(fd_) : "";
    ::close(std::exchange(fd_, -1));
    if (error != EWOULDBLOCK)
      throw Error(str("train.run_dir '", run_dir, "': cannot lock ", path, ": ", std::strerror(error)));
    throw Error(str("train.run_dir '", run_dir, "' is in use by another zest train (", holder,
                    "); two runs in one folder would replace each other's checkpoints and interleave metrics.jsonl. "
                    "Wait for it or stop it, or give this run its own train.run_dir"));
  }
  const std::string me = self_description();
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, me.data(), me.size(), 0) != static_cast<ssize_t>(me.size())) {
    // The lock holds without the note; only the message of a refused second run is poorer.
  }
}

RunLock::~RunLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock
}

RunLock::RunLock(RunLock&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}

RunLock& RunLock::operator=(RunLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

}  // namespace zest
