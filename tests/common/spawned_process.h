// Starting a child process for the tests that drive programs: argv run with `env` entries before this
// process's environment (earlier entries win), its stdout and stderr merged on one pipe the parent reads.
// tests/launch's Child and Background build on it.
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <string>
#include <vector>

extern char** environ;

namespace zest::testing {

struct SpawnedProcess {
  pid_t pid = -1;     // -1: the pipe could not be made (nothing started)
  int output_fd = -1; // the read end of the merged stdout/stderr
};

// own_group: the child leads a process group of its own (so that the whole group can be killed).
inline SpawnedProcess spawn_process(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                                    bool own_group) {
  // argv and envp are built before fork: the child only calls async-signal-safe functions.
  std::vector<std::string> envs(env);
  for (char** e = environ; *e != nullptr; ++e) envs.emplace_back(*e);  // earlier entries win
  std::vector<char*> envp, args;
  for (const std::string& kv : envs) envp.push_back(const_cast<char*>(kv.c_str()));
  envp.push_back(nullptr);
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  int fds[2];
  if (::pipe(fds) != 0) return {};
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (own_group) ::setpgid(0, 0);
    ::dup2(fds[1], 1);
    ::dup2(fds[1], 2);
    ::close(fds[0]);
    ::close(fds[1]);
    ::execve(args[0], args.data(), envp.data());
    ::_exit(127);
  }
  if (own_group) ::setpgid(pid, pid);  // both sides set it: whichever runs first, the group exists before use
  ::close(fds[1]);
  return {pid, fds[0]};
}

}  // namespace zest::testing
