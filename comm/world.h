// World discovery and the process-wide communicator: who launched us (mpirun, a torchrun-style
// environment, or nobody) and the communicator that matches.
#pragma once

#include "comm/communicator.h"

#include <memory>
#include <string>

namespace zest {

enum class Launcher { single, mpi, torchrun };

struct WorldInfo {
  Launcher launcher = Launcher::single;
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  int local_size = 1;
  std::string master_addr;  // torchrun only
  int master_port = 0;      // torchrun only
};

// Reads OpenMPI's OMPI_COMM_WORLD_* variables, else RANK/WORLD_SIZE/LOCAL_RANK(/LOCAL_WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT), else a single process. Inconsistent values are errors naming the variable.
WorldInfo discover_world();

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
