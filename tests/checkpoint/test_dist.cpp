// Checkpoints across real processes (mpirun -np 2 / -np 4; world size 1 in the plain run): exact
// resume on the whole world, and resharding between the world and sub-worlds built with
// MPI_Comm_split (N → N/2, N → 1, 1 → N), continued training compared with the uninterrupted run; the
// same for the EMA of the weights (bitwise after the load, at every stage).
#include "ckpt_test_util.h"

#include "comm/mpi_communicator.h"
#include "comm/self_communicator.h"
#include "comm/world.h"

#include <gtest/gtest.h>

#include <mpi.h>

namespace zest::testing {
namespace {

bool is_mpi() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  return initialized != 0;
}

// The first `size` ranks of the world as a communicator (nullptr on the others). Collective over the world.
std::shared_ptr<Communicator> sub_world(int size) {
  auto world = world_communicator();
  if (size == world->size()) return world;
  if (size == 1 || !is_mpi()) return world->rank() == 0 ? std::make_shared<SelfCommunicator>() : nullptr;
  MPI_Comm split = MPI_COMM_NULL;
  const int color = world->rank() < size ? 0 : MPI_UNDEFINED;
  ZEST_MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, color, world->rank(), &split));
  if (split == MPI_COMM_NULL) return nullptr;
  auto comm = std::make_shared<MpiCommunicator>(split, world->rank(), size);
  MPI_Comm_free(&split);  // MpiCommunicator keeps its own duplicate
  return comm;
}

// A folder every rank agrees on (rank 0's temporary folder); removed by rank 0 at the end.
struct SharedDir {
  SharedDir() : path(world_communicator()->broadcast_string(owner ? owner->path() : "", 0)) {}
  std::unique_ptr<TempDir> owner = world_communicator()->rank() == 0 ? std::make_unique<TempDir>() : nullptr;
  std::string path;
};

TEST(DistCheckpoint, ExactResumeOnTheWholeWorld) {
  auto comm = world_communicator();
  for (const int stage : {0, 1, 2}) {
    SharedDir dir;
    ToyRun a = make_toy_run(comm, {stage, false, 7});
    train_toy(a, 0, 10);
    auto request = toy_save_request(dir.path);
    request.rank_extra_json = "{\"rank\": " + std::to_string(comm->rank()) + "}";
    checkpoint::save(*a.engine, request);
    train_toy(a, 10, 20);
    ToyRun b = make_toy_run(comm, {stage, false, 99});
    const auto loaded = checkpoint::load(*b.engine, toy_load_request(dir.path));
    EXPECT_EQ(loaded.rank_extra_json, "{\"rank\":" + std::to_string(comm->rank()) + "}");
    train_toy(b, 10, 20);
    expect_bitwise_equal(engine_state(*a.engine), engine_state(*b.engine), "stage " + std::to_string(stage));
    expect_bitwise_equal(params_of(*a.model), params_of(*b.model), "parameters, stage " + std::to_string(stage));
    comm->barrier();
  }
}

// Saves with `from` ranks, loads with `to` ranks; continued training must match the uninterrupted
// `from`-rank run within 1e-6 relative. Every world rank computes the reference itself when from = 1.
void reshard_case(int from, int to, int stage) {
  SharedDir dir;
  std::map<std::string, torch::Tensor> uninterrupted;
  if (auto comm = sub_world(from)) {
    ToyRun a = make_toy_run(comm, {stage, false, 7});
    train_toy(a, 0, 10);
    checkpoint::save(*a.engine, toy_save_request(dir.path));
    train_toy(a, 10, 20);
    uninterrupted = params_of(*a.model);
  }
  world_communicator()->barrier();
  if (uninterrupted.empty()) {  // ranks outside the saving world: recompute the reference on a world of one
    ToyRun a = make_toy_run(std::make_shared<SelfCommunicator>(), {stage, false, 7});
    train_toy(a, 0, 20);
    uninterrupted = params_of(*a.model);
  }
  if (auto comm = sub_world(to)) {
    ToyRun b = make_toy_run(comm, {stage, false, 99});
    const auto loaded = checkpoint::load(*b.engine, toy_load_request(dir.path));
    EXPECT_EQ(loaded.saved_world_size, from);
    train_toy(b, 10, 20);
    EXPECT_LT(max_relative_difference(uninterrupted, params_of(*b.model)), 1e-6)
        << from << " → " << to << " ranks, stage " << stage;
  }
  world_communicator()->barrier();
}

TEST(DistCheckpoint, ReshardBetweenWorldAndSubWorlds) {
  const int n = world_communicator()->size();
  for (const int stage : {0, 1, 2}) {
    if (n / 2 > 1) reshard_case(n, n / 2, stage);
    reshard_case(n, 1, stage);
    reshard_case(1, n, stage);
  }
}

TEST(DistCheckpoint, EmaExactResumeOnTheWholeWorld) {
  auto comm = world_communicator();
  for (const int stage : {0, 1, 2, 3}) {
    const std::string what = "stage " + std::to_string(stage);
    SharedDir dir;
    ToyRun a = make_toy_run(comm, {stage, false, 7, /*ema=*/true});
    train_toy(a, 0, 7);
    checkpoint::save(*a.engine, toy_save_request(dir.path));
    const auto saved = ema_by_name(*a.engine);
    train_toy(a, 7, 14);
    ToyRun b = make_toy_run(comm, {stage, false, 99, true});
    checkpoint::load(*b.engine, toy_load_request(dir.path));
    expect_bitwise_equal(saved, ema_by_name(*b.engine), "EMA after the load, " + what);
    train_toy(b, 7, 14);
    expect_bitwise_equal(engine_state(*a.engine), engine_state(*b.engine), "engine state with EMA, " + what);
    comm->barrier();
  }
}

// The EMA saved by `from` ranks at one stage, loaded by `to` ranks at another: bitwise the saved EMA
// (world rank 0 belongs to both sub-worlds and compares).
void reshard_ema_case(int from, int from_stage, int to, int to_stage) {
  SharedDir dir;
  std::map<std::string, torch::Tensor> saved, loaded;
  if (auto comm = sub_world(from)) {
    ToyRun a = make_toy_run(comm, {from_stage, false, 7, true});
    train_toy(a, 0, 7);
    checkpoint::save(*a.engine, toy_save_request(dir.path));
    saved = ema_by_name(*a.engine);
  }
  world_communicator()->barrier();
  if (auto comm = sub_world(to)) {
    ToyRun b = make_toy_run(comm, {to_stage, false, 99, true});
    checkpoint::load(*b.engine, toy_load_request(dir.path));
    loaded = ema_by_name(*b.engine);
  }
  if (world_communicator()->rank() == 0)
    expect_bitwise_equal(saved, loaded, str("EMA of ", from, " ranks at stage ", from_stage, " loaded by ", to,
                                            " at stage ", to_stage));
  world_communicator()->barrier();
}

TEST(DistCheckpoint, EmaReshardsBetweenWorldAndSubWorlds) {
  const int n = world_communicator()->size();
  reshard_ema_case(n, 2, 1, 0);
  reshard_ema_case(1, 0, n, 3);
  if (n / 2 > 1) reshard_ema_case(n, 3, n / 2, 1);
}

TEST(DistCheckpoint, AsyncSaveCommitsAcrossProcesses) {
  auto comm = world_communicator();
  SharedDir dir;
  ToyRun a = make_toy_run(comm, {2, false, 7});
  checkpoint::Saver saver;
  auto request = toy_save_request(dir.path);
  request.async = true;
  request.keep_last = 2;
  for (int64_t step = 0; step < 6; ++step) {
    train_toy(a, step, step + 1);
    saver.poll(*comm);
    if (step % 2 == 1) saver.save(*a.engine, request);
  }
  saver.wait(*comm);
  EXPECT_FALSE(saver.has_pending());
  if (comm->rank() == 0) {
    const auto all = checkpoint::list_checkpoints(dir.path);
    ASSERT_EQ(all.size(), 2u);
    EXPECT_EQ(all.back().step, 6);
  }
  ToyRun b = make_toy_run(comm, {2, false, 99});
  EXPECT_EQ(checkpoint::load(*b.engine, toy_load_request(dir.path)).step, 6);
  expect_bitwise_equal(params_of(*a.model), params_of(*b.model), "after async saves");
  comm->barrier();
}

}  // namespace
}  // namespace zest::testing
