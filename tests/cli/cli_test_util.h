// Helpers of the CLI tests: run the built `zest` with stdout and stderr kept apart, a time bound, an
// optional working directory, address-space and file-size limits, or stdout sent to a file (/dev/full);
// and the check that a failure is one clear line.
#pragma once

#include "common/zest_binary.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

namespace zest::testing {

struct CliResult {
  int status = 0;          // raw wait status
  bool timed_out = false;  // killed after the time bound
  std::string out;
  std::string err;
  double seconds = 0.0;

  bool exited() const { return !timed_out && WIFEXITED(status); }
  int code() const { return WIFEXITED(status) ? WEXITSTATUS(status) : -1; }
  std::string describe() const {
    std::string what = timed_out ? "timed out" : WIFSIGNALED(status) ? "killed by signal " + std::to_string(WTERMSIG(status))
                                                                     : "exit " + std::to_string(code());
    return what + "\n--- stdout ---\n" + out.substr(0, 4000) + "\n--- stderr ---\n" + err.substr(0, 4000);
  }
};

struct CliOptions {
  double timeout_s = 60.0;
  std::string cwd;               // "" = ours
  long long address_limit = 0;   // RLIMIT_AS in bytes (0 = none)
  long long file_size_limit = -1;  // RLIMIT_FSIZE in bytes (-1 = none); zest must handle SIGXFSZ itself
  std::string stdout_path;       // "" = captured; else stdout goes to this file (e.g. /dev/full)
};

// Runs argv (argv[0] a path) to completion or the time bound. Only async-signal-safe calls after fork.
inline CliResult run_cli(const std::vector<std::string>& argv, const CliOptions& options = {}) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  int out_pipe[2], err_pipe[2];
  CliResult result;
  if (::pipe(out_pipe) != 0 || ::pipe(err_pipe) != 0) return result;
  const auto start = std::chrono::steady_clock::now();
  const int stdout_file = options.stdout_path.empty() ? -1 : ::open(options.stdout_path.c_str(), O_WRONLY);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(stdout_file >= 0 ? stdout_file : out_pipe[1], 1);
    ::dup2(err_pipe[1], 2);
    ::close(out_pipe[0]);
    ::close(err_pipe[0]);
    if (!options.cwd.empty() && ::chdir(options.cwd.c_str()) != 0) ::_exit(126);
    if (options.address_limit > 0) {
      const rlimit limit{static_cast<rlim_t>(options.address_limit), static_cast<rlim_t>(options.address_limit)};
      ::setrlimit(RLIMIT_AS, &limit);
    }
    if (options.file_size_limit >= 0) {
      const rlimit limit{static_cast<rlim_t>(options.file_size_limit), static_cast<rlim_t>(options.file_size_limit)};
      ::setrlimit(RLIMIT_FSIZE, &limit);
    }
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  if (stdout_file >= 0) ::close(stdout_file);
  std::vector<pollfd> fds{{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  std::string* sinks[] = {&result.out, &result.err};
  int open_streams = 2;
  while (open_streams > 0) {
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (elapsed > options.timeout_s) {
      result.timed_out = true;
      ::kill(pid, SIGKILL);
      break;
    }
    if (::poll(fds.data(), fds.size(), 100) <= 0) continue;
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      char buffer[65536];
      const ssize_t n = ::read(fds[i].fd, buffer, sizeof(buffer));
      if (n > 0) {
        sinks[i]->append(buffer, static_cast<size_t>(n));
      } else {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        --open_streams;
      }
    }
  }
  for (const pollfd& p : fds)
    if (p.fd >= 0) ::close(p.fd);
  ::waitpid(pid, &result.status, 0);
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

// "" when `err` is one clear error line ("zest: error: ...", nothing else, no trace); else what is wrong.
inline std::string one_clear_error_line(const std::string& err) {
  const std::string prefix = "zest: error: ";
  if (err.rfind(prefix, 0) != 0) return "stderr does not start with '" + prefix + "'";
  if (err.empty() || err.back() != '\n' || err.find('\n') != err.size() - 1) return "stderr is not exactly one line";
  for (const char* trace : {"Exception raised from", "frame #", "terminate called", "Aborted", "c10::", "Segmentation"})
    if (err.find(trace) != std::string::npos) return std::string("stderr holds a trace marker: ") + trace;
  return "";
}

}  // namespace zest::testing
