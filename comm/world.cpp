// World discovery from the launcher's environment, MPI start-up/shutdown, and the world communicator
// (MPI under mpirun, Gloo under a torchrun-style environment, else the world of one).
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

std::optional<int> env_int(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  try {
    size_t used = 0;
    const int parsed = std::stoi(value, &used);
    if (used == std::string(value).size()) return parsed;
  } catch (const std::exception&) {
  }
  ZEST_FAIL("environment variable ", name, "='", value, "' is not an integer");
}

int require_env_int(const char* name, const char* launcher) {
  const auto value = env_int(name);
  ZEST_CHECK(value.has_value(), "environment variable ", name, " is missing (", launcher,
             " environment detected)");
  return *value;
}

void validate(const WorldInfo& w, const char* source) {
  ZEST_CHECK(w.size >= 1, source, ": world size ", w.size, " must be >= 1");
  ZEST_CHECK(w.rank >= 0 && w.rank < w.size, source, ": rank ", w.rank, " is outside [0, ", w.size, ")");
  ZEST_CHECK(w.local_size >= 1 && w.local_rank >= 0 && w.local_rank < w.local_size, source,
             ": local rank ", w.local_rank, " is outside [0, ", w.local_size, ")");
}

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

WorldInfo discover_world() {
  WorldInfo w;
  if (env_int("OMPI_COMM_WORLD_SIZE")) {
    w.launcher = Launcher::mpi;
    w.size = require_env_int("OMPI_COMM_WORLD_SIZE", "OpenMPI");
    w.rank = require_env_int("OMPI_COMM_WORLD_RANK", "OpenMPI");
    w.local_rank = env_int("OMPI_COMM_WORLD_LOCAL_RANK").value_or(0);
    w.local_size = env_int("OMPI_COMM_WORLD_LOCAL_SIZE").value_or(1);
    validate(w, "OpenMPI environment");
  } else if (env_int("WORLD_SIZE")) {
    w.launcher = Launcher::torchrun;
    w.size = require_env_int("WORLD_SIZE", "torchrun-style");
    w.rank = require_env_int("RANK", "torchrun-style");
    w.local_rank = env_int("LOCAL_RANK").value_or(w.rank);
    w.local_size = env_int("LOCAL_WORLD_SIZE").value_or(w.size);
    const char* addr = std::getenv("MASTER_ADDR");
    w.master_addr = addr && *addr ? addr : "127.0.0.1";
    w.master_port = env_int("MASTER_PORT").value_or(29500);
    validate(w, "torchrun-style environment (RANK/WORLD_SIZE)");
  }
  return w;
}

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
  // A torchrun-style world (RANK/WORLD_SIZE, e.g. from `zest launch`) rendezvouses over TCP when its
  // communicator is first needed (world_communicator()).
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
      comm = std::make_shared<MpiCommunicator>(MPI_COMM_WORLD, w.local_rank, w.local_size);
    } else if (w.launcher == Launcher::torchrun && w.size > 1) {
      comm = std::make_shared<GlooCommunicator>(GlooOptions{w.rank, w.size, w.local_rank, w.local_size,
                                                            w.master_addr, w.master_port,
                                                            comm_timeout_from_env()});
    } else {
      comm = std::make_shared<SelfCommunicator>();
    }
  }
  return comm;
}

}  // namespace zest
