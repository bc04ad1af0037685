// Shared GoogleTest main: sets up the world (MPI under mpirun), and lets only rank 0 print results
// (every rank still runs every test; mpirun's exit status fails if any rank fails).
#include "comm/world.h"

#include <gtest/gtest.h>

int main(int argc, char** argv) {
  zest::WorldGuard world;
  ::testing::InitGoogleTest(&argc, argv);
  if (world.rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());  // gtest owns its listeners
  }
  return RUN_ALL_TESTS();
}
