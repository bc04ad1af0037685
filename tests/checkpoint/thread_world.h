// ThreadWorld: N ranks as N threads of one process, with real collectives over shared memory, so the
// checkpoint tests can train, save and load at any world size (4→2, 1→3, ...) without mpirun.
#pragma once

#include "comm/communicator.h"

#include <functional>
#include <memory>

namespace zest::testing {

// Runs fn(rank, comm) on `size` threads with a communicator over them; waits for all and rethrows the
// first failure (a failing rank aborts the world so the others leave their collectives).
void run_ranks(int size, const std::function<void(int rank, std::shared_ptr<Communicator> comm)>& fn);

}  // namespace zest::testing
