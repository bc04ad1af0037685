// World discovery from the launcher's environment, MPI start-up/shutdown, and the world communicator
// (MPI under mpirun, Gloo under any other launcher, else the world of one).
#include "comm/world.h"

#include "comm/device_communicator.h"
#include "core/check.h"
#include "comm/gloo_communicator.h"
#include "comm/mpi_communicator.h"
#include "comm/self_communicator.h"

#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace zest {
namespace {

WorldInfo& current_world() {
  static WorldInfo world;
  return world;
}
bool& world_alive() {
  static bool alive = false;
  return alive;
}
std::shared_ptr<Communicator>& world_comm_slot() {
  static std::shared_ptr<Communicator> comm;
  return comm;
}

}  // namespace

WorldGuard::WorldGuard() : info_(discover_world()) {
  ZEST_CHECK(!world_alive(), "a WorldGuard already exists in this process");
  if (info_.launcher == Launcher::mpi) {
    int provided = 0;
    ZEST_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided));
    mpi_initialized_ = true;
    ZEST_CHECK(provided >= MPI_THREAD_SERIALIZED, "MPI provides thread level ", provided,
               " but zest needs MPI_THREAD_SERIALIZED");
    int size = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    ZEST_CHECK(size == info_.size, "MPI world size ", size, " differs from OMPI_COMM_WORLD_SIZE ",
               info_.size);
  }
  // Any other world of several ranks (torchrun, zest launch, Horovod's Gloo mode, srun) rendezvouses
  // over TCP when its communicator is first needed (world_communicator()).
  if (info_.size > 1) error_rank() = info_.rank;
  current_world() = info_;
  world_alive() = true;
}

WorldGuard::~WorldGuard() {
  release_device_communicators();
  world_comm_slot().reset();
  world_alive() = false;
  if (mpi_initialized_) {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
  }
}

void abort_world(const std::string& message) {
  std::fprintf(stderr, "zest: error: %s\n", message.c_str());
  std::fflush(stderr);
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized && current_world().size > 1) MPI_Abort(MPI_COMM_WORLD, 1);
  std::exit(1);
}

std::shared_ptr<Communicator> world_communicator() {
  ZEST_CHECK(world_alive(), "world_communicator() needs a live zest::WorldGuard (create one in main)");
  auto& comm = world_comm_slot();
  if (!comm) {
    const WorldInfo& w = current_world();
    if (w.launcher == Launcher::mpi) {
      auto mpi = std::make_shared<MpiCommunicator>(MPI_COMM_WORLD, w.local_rank, w.local_size);
      if (w.size > 1) mpi->watch_peers();
      comm = mpi;
    } else if (w.size > 1) {
      comm = std::make_shared<GlooCommunicator>(w);
    } else {
      comm = std::make_shared<SelfCommunicator>();
    }
  }
  return comm;
}

}  // namespace zest
