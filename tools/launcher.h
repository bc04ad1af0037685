// The local launcher behind `zest launch`: spawns N ranks of a command with a torchrun-style
// environment, prefixes their output with the rank, forwards signals, and stops every rank when one fails.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace zest {

struct LaunchOptions {
  int nprocs = 1;
  // The command and its arguments. "zest" alone means this very executable, so that a launcher
  // always starts ranks of its own build whatever PATH says.
  std::vector<std::string> command;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;                     // 0 = a free port picked at launch
  std::chrono::milliseconds grace{5000};  // after a rank failed: SIGTERM to the others, SIGKILL after this
};

// Runs the ranks until all have exited. Every rank gets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT, ZEST_LAUNCHER_PID (and OMP_NUM_THREADS = cores / N unless set). Each rank runs in its own
// process group with stdin from /dev/null; each line it prints to stdout/stderr is written to ours
// as "[rank R] line".
//
// Signals: the first SIGINT/SIGTERM/SIGHUP is forwarded to every rank (a clean stop: zest train saves
// and exits 0); a second one kills them. If a rank exits non-zero or by a signal, the others get
// SIGTERM, then SIGKILL after `grace`, and a message names the rank and its status. If the launcher
// itself dies (kill -9), each rank gets SIGTERM from the kernel (PR_SET_PDEATHSIG); `zest train` turns
// that into its clean stop (tools/stop_signal.h).
//
// Returns the launcher's exit status: 0 when every rank exited 0, else the first failed rank's exit
// code (128 + signal number for a rank killed by a signal).
int run_ranks(const LaunchOptions& options);

// A TCP port that is free on `addr` right now (the kernel's pick).
int find_free_port(const std::string& addr);

}  // namespace zest
