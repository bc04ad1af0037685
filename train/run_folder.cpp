// Run-folder checks and config.toml (see run_folder.h).
#include "train/run_folder.h"

#include "checkpoint/directory.h"
#include "core/check.h"
#include "core/fd_write.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace zest {
namespace {

namespace fs = std::filesystem;

std::string errno_text() { return std::strerror(errno); }

}  // namespace

void write_file_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  ::unlink(tmp.c_str());  // a leftover, or a planted link: the new file is created, never written through
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) throw Error("cannot write " + path + ": " + errno_text());
  const bool written = write_all(fd, text) && ::fsync(fd) == 0;
  const std::string reason = written ? "" : errno_text();
  const bool closed = ::close(fd) == 0;
  if (!written || !closed) {
    ::unlink(tmp.c_str());
    throw Error("cannot write " + path + ": " + (written ? errno_text() : reason));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = errno_text();
    ::unlink(tmp.c_str());
    throw Error("cannot write " + path + ": rename failed: " + why);
  }
}

void ensure_writable_dir(const std::string& dir, const std::string& key) {
  std::error_code error;
  if (fs::exists(dir, error) && !fs::is_directory(dir, error))
    throw Error(key + " '" + dir + "' exists and is not a folder");
  fs::create_directories(dir, error);
  if (error) throw Error("cannot create " + key + " '" + dir + "': " + error.message());
  const std::string probe = (fs::path(dir) / (".zest_write_probe_" + std::to_string(::getpid()))).string();
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  const bool ok = fd >= 0 && write_all(fd, "z");
  const std::string reason = ok ? "" : errno_text();
  if (fd >= 0) ::close(fd);
  ::unlink(probe.c_str());
  if (!ok) throw Error(key + " '" + dir + "' is not writable: " + reason);
}

void refuse_fresh_start_over_checkpoints(const RunConfig& config) {
  const auto existing = checkpoint::list_checkpoints(config.checkpoint.dir);
  if (existing.empty()) return;
  const auto latest = checkpoint::find_latest(config.checkpoint.dir);
  throw Error(str("--no-resume: checkpoint.dir '", config.checkpoint.dir, "' already holds ", existing.size(),
                  " checkpoint(s) of a run (latest: ", latest ? *latest : existing.back().path,
                  "); a fresh run would overwrite them step by step. Resume it (leave out --no-resume), "
                  "remove them, or give this run its own train.run_dir or checkpoint.dir"));
}

RunLock prepare_run_folders(const RunConfig& config, bool resume, Communicator& comm) {
  RunLock lock;
  if (comm.rank() == 0) {
    ensure_writable_dir(config.train.run_dir, "train.run_dir");
    lock = RunLock(config.train.run_dir);  // before anything in the folders is read or written
    ensure_writable_dir(config.checkpoint.dir, "checkpoint.dir");
    if (!resume) refuse_fresh_start_over_checkpoints(config);
    write_file_atomically((fs::path(config.train.run_dir) / "config.toml").string(), to_toml(config));
  }
  comm.barrier();
  return lock;
}

}  // namespace zest
