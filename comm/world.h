// The process-wide world: MPI start-up/shutdown when mpirun started us, and the communicator that
// matches the launcher (comm/launch_env.h reads which one it was).
#pragma once

#include "comm/communicator.h"
#include "comm/launch_env.h"

#include <memory>
#include <string>

namespace zest {

// Initialises the process's communication for the discovered world (MPI_Init_thread under mpirun)
// and finalizes it on destruction. Exactly one per process, created first thing in main().
class WorldGuard {
 public:
  WorldGuard();
  ~WorldGuard();
  WorldGuard(const WorldGuard&) = delete;
  WorldGuard& operator=(const WorldGuard&) = delete;
  const WorldInfo& info() const { return info_; }
  int rank() const { return info_.rank; }

 private:
  WorldInfo info_;
  bool mpi_initialized_ = false;
};

// The communicator over all ranks of the world (created on first use; needs a live WorldGuard).
std::shared_ptr<Communicator> world_communicator();

// Prints "zest: error: [rank R] MESSAGE" and ends the whole job: MPI_Abort under mpirun (so no rank is
// left waiting in a collective), exit(1) otherwise (zest launch then stops the other ranks).
[[noreturn]] void abort_world(const std::string& message);

}  // namespace zest
