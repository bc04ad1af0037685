// The launcher behind `zest launch`: spawns this node's N ranks of a command with a torchrun-style
// environment (one node of several with --nnodes/--node-rank), prefixes their output with the rank,
// forwards signals, and stops every rank when one fails, naming the rank that was really at fault.
#pragma once

#include "launch/launch_hosts.h"

#include <chrono>
#include <string>
#include <vector>

namespace zest {

struct LaunchOptions {
  int nprocs = 1;     // ranks on this node
  int nnodes = 1;     // nodes, each started with the same nprocs (torchrun's --nnodes)
  int node_rank = 0;  // this node: its ranks are node_rank·nprocs ... + nprocs − 1
  std::string node_label;  // prefix "[LABEL:rank R]" instead of "[rank R]" (the node's name, for -H)
  // The command and its arguments. "zest" alone means this very executable, so that a launcher
  // always starts ranks of its own build whatever PATH says.
  std::vector<std::string> command;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;                     // 0 = a free port picked at launch (29500 with several nodes)
  std::chrono::milliseconds grace{5000};  // after a rank failed: SIGTERM to the others, SIGKILL after this

  // -H node1:4,node2:4 / --hostfile: the nodes and their ranks. This launcher then starts one
  // `zest launch --nnodes ... --node-rank i` per node (each with -n of its slots, all equal): here for a
  // name of this host, else as `RSH NAME 'cd CWD && exec ZEST launch ...'`. The first node holds rank 0.
  std::vector<std::pair<std::string, int>> hosts;
  std::vector<std::string> rsh{"ssh", "-tt", "-o", "BatchMode=yes"};  // the remote shell's command
};

// Runs the ranks until all have exited. Every rank gets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
// GROUP_RANK, MASTER_ADDR, MASTER_PORT, ZEST_LAUNCHER_PID (and OMP_NUM_THREADS = cores / N unless set). Each rank runs in its own
// process group with stdin from /dev/null; each line it prints to stdout/stderr is written to ours
// as "[rank R] line".
//
// Signals: the first SIGINT/SIGTERM/SIGHUP is forwarded to every rank (a clean stop: zest train saves
// and exits 0); a second one kills them. If a rank exits non-zero or by a signal, the others get
// SIGTERM (and SIGCONT, for a stopped one), then SIGKILL after `grace`, and a message names the rank
// and its status — and, when its error says which rank(s) a collective waited for in vain ("never
// arrived: rank 1 ..."), those ranks, with whether they were stopped. If the launcher
// itself dies (kill -9), each rank gets SIGTERM from the kernel (PR_SET_PDEATHSIG); `zest train` turns
// that into its clean stop (train/stop_signal.h).
//
// Returns the launcher's exit status: 0 when every rank exited 0, else the first failed rank's exit
// code (128 + signal number for a rank killed by a signal).
int run_ranks(const LaunchOptions& options);

}  // namespace zest
