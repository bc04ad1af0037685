// The Gloo communicator under `zest launch`: every collective on every dtype the engine uses, with
// exact expected values (DistGloo.*, run here under 3 ranks), and a vanished or stalled rank turning
// into an error that names the operation instead of a hang.
#include "comm/world.h"
#include "core/check.h"
#include "launch_test_util.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <thread>

namespace zest::testing {
namespace {

bool launched_by_zest() { return std::getenv("RANK") != nullptr && std::getenv("OMPI_COMM_WORLD_SIZE") == nullptr; }

// The rank's own tests, run in every world (a single process uses the self communicator).
TEST(DistGloo, AllreduceAllDtypes) {
  auto comm = world_communicator();
  const int w = comm->size(), r = comm->rank();
  if (launched_by_zest() && w > 1) {
    EXPECT_EQ(comm->backend(), "gloo");
  }
  for (torch::Dtype dtype : {torch::kFloat32, torch::kBFloat16, torch::kFloat16, torch::kFloat64, torch::kInt64}) {
    auto t = torch::full({1000}, r + 1, dtype);
    comm->allreduce(t, ReduceOp::sum)->wait();
    EXPECT_TRUE(torch::equal(t, torch::full({1000}, w * (w + 1) / 2, dtype))) << dtype;
    auto m = torch::arange(5, torch::kInt64) * (r + 1);
    comm->allreduce_sync(m, ReduceOp::max);
    EXPECT_TRUE(torch::equal(m, torch::arange(5, torch::kInt64) * w));
  }
}

TEST(DistGloo, ReduceScatterWithMixedDtypes) {
  auto comm = world_communicator();
  const int w = comm->size(), r = comm->rank();
  const int64_t n = 7;
  const auto position = torch::arange(w * n, torch::kFloat32) + 1;  // 1 .. w·n
  const auto input = position * (r + 1);
  const auto before = input.clone();
  auto out = torch::empty({n}, torch::kFloat32);
  comm->reduce_scatter(input, out, ReduceOp::sum)->wait();
  const auto expected = position.narrow(0, r * n, n) * (w * (w + 1) / 2);
  EXPECT_TRUE(torch::equal(out, expected));
  EXPECT_TRUE(torch::equal(input, before)) << "reduce_scatter changed its input";
  auto out32 = torch::empty({n}, torch::kFloat32);  // bf16 gradients into an fp32 shard
  comm->reduce_scatter(input.to(torch::kBFloat16), out32, ReduceOp::sum)->wait();
  EXPECT_TRUE(torch::equal(out32, expected));
}

TEST(DistGloo, AllgatherBroadcastBarrierAndHelpers) {
  auto comm = world_communicator();
  const int w = comm->size(), r = comm->rank();
  for (torch::Dtype dtype : {torch::kFloat32, torch::kBFloat16, torch::kInt64}) {
    const auto expected = torch::arange(w * 3, torch::kFloat32).to(dtype);
    auto out = torch::zeros({w * 3}, dtype);
    comm->allgather(expected.narrow(0, r * 3, 3).clone(), out)->wait();
    EXPECT_TRUE(torch::equal(out, expected)) << dtype;
    auto in_place = torch::zeros({w * 3}, dtype);
    in_place.narrow(0, r * 3, 3).copy_(expected.narrow(0, r * 3, 3));
    comm->allgather(in_place.narrow(0, r * 3, 3), in_place)->wait();
    EXPECT_TRUE(torch::equal(in_place, expected)) << "in place, " << dtype;
  }
  auto flags = r == w - 1 ? torch::tensor({true, false, true}) : torch::zeros({3}, torch::kBool);
  comm->broadcast_sync(flags, w - 1);
  EXPECT_TRUE(torch::equal(flags, torch::tensor({true, false, true})));
  auto half = torch::full({4}, r == 0 ? 1.5 : 0.0, torch::kBFloat16);
  comm->broadcast_sync(half, 0);
  EXPECT_EQ(half.sum().item<float>(), 6.0f);
  comm->barrier();
  EXPECT_EQ(comm->broadcast_string(r == 0 ? "from rank 0" : "", 0), "from rank 0");
  EXPECT_EQ(comm->any(r == w - 1), true);
  EXPECT_EQ(comm->any(false), false);
}

// Helpers for the failure tests below: run only when asked (they make a rank vanish or stall).
TEST(DistGlooFailure, DISABLED_PeerExitsBeforeAllreduce) {
  auto comm = world_communicator();
  comm->barrier();
  if (comm->rank() == 1) std::_Exit(0);
  auto t = torch::ones({16});
  try {
    comm->allreduce_sync(t, ReduceOp::sum);
    ADD_FAILURE() << "allreduce with a vanished rank succeeded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("allreduce"), std::string::npos) << e.what();
    std::printf("error-as-expected: %s\n", e.what());
  }
}

TEST(DistGlooFailure, DISABLED_StalledPeerTimesOut) {
  auto comm = world_communicator();
  comm->barrier();
  if (comm->rank() == 1) {
    std::this_thread::sleep_for(std::chrono::seconds(3));
    std::_Exit(0);
  }
  auto t = torch::ones({16});
  try {
    comm->allreduce_sync(t, ReduceOp::sum);
    ADD_FAILURE() << "allreduce with a stalled rank succeeded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("allreduce"), std::string::npos) << e.what();
    std::printf("error-as-expected: %s\n", e.what());
  }
}

std::vector<std::string> launch_self(int n, const std::string& filter) {
  return {zest_binary(), "launch", "-n", std::to_string(n), "--", self_binary(), "--gtest_filter=" + filter,
          "--gtest_also_run_disabled_tests"};
}

TEST(LaunchGloo, CollectivesAcrossThreeRanks) {
  Child child(launch_self(3, "DistGloo.*"));
  const int status = child.finish();
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << child.output();
  EXPECT_NE(child.output().find("[rank 0] [  PASSED  ] 3 tests"), std::string::npos) << child.output();
}

TEST(LaunchGloo, VanishedRankIsAnErrorNotAHang) {
  Child child(launch_self(2, "DistGlooFailure.DISABLED_PeerExitsBeforeAllreduce"), {"ZEST_COMM_TIMEOUT_S=20"});
  const int status = child.finish();
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << child.output();
  EXPECT_NE(child.output().find("[rank 0] error-as-expected"), std::string::npos) << child.output();
  EXPECT_LT(child.seconds(), 15.0);
}

TEST(LaunchGloo, StalledRankTimesOut) {
  Child child(launch_self(2, "DistGlooFailure.DISABLED_StalledPeerTimesOut"), {"ZEST_COMM_TIMEOUT_S=1"});
  const int status = child.finish();
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << child.output();
  EXPECT_NE(child.output().find("[rank 0] error-as-expected"), std::string::npos) << child.output();
}

}  // namespace
}  // namespace zest::testing
