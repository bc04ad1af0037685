// Resume at another world size (and stage): a checkpoint saved by N ranks loads on M ranks by
// re-slicing from the manifest's offsets. Right after loading the parameters equal the saved ones
// bitwise; training on continues within 1e-6 (relative) of the uninterrupted N-rank run.
#include "ckpt_test_util.h"
#include "thread_world.h"

#include "checkpoint/shard_reader.h"

#include <gtest/gtest.h>

namespace zest::testing {
namespace {

struct ReshardCase {
  int from_world;
  int to_world;
  int from_stage;
  int to_stage;
};

void PrintTo(const ReshardCase& c, std::ostream* os) {
  *os << c.from_world << " ranks stage " << c.from_stage
      << " -> " << c.to_world << " ranks stage " << c.to_stage;
}

std::string reshard_case_name(const ::testing::TestParamInfo<ReshardCase>& info) {
  const ReshardCase& c = info.param;
  return "np" + std::to_string(c.from_world) + "s" + std::to_string(c.from_stage) + "_to_np" +
         std::to_string(c.to_world) + "s" + std::to_string(c.to_stage);
}

class Reshard : public ::testing::TestWithParam<ReshardCase> {};

TEST_P(Reshard, ContinuesLikeTheUninterruptedRun) {
  const ReshardCase c = GetParam();
  TempDir dir;
  std::map<std::string, torch::Tensor> at_save, uninterrupted;
  run_ranks(c.from_world, [&](int rank, std::shared_ptr<Communicator> comm) {
    ToyRun a = make_toy_run(comm, {c.from_stage, false, 7});
    train_toy(a, 0, 10);
    checkpoint::save(*a.engine, toy_save_request(dir.path()));
    if (rank == 0) at_save = params_of(*a.model);
    train_toy(a, 10, 20);
    if (rank == 0) uninterrupted = params_of(*a.model);
  });
  std::vector<std::map<std::string, torch::Tensor>> loaded(c.to_world), resumed(c.to_world);
  run_ranks(c.to_world, [&](int rank, std::shared_ptr<Communicator> comm) {
    ToyRun b = make_toy_run(comm, {c.to_stage, false, 99});
    const auto state = checkpoint::load(*b.engine, toy_load_request(dir.path()));
    EXPECT_EQ(state.saved_world_size, c.from_world);
    EXPECT_EQ(state.rank_extra_json.empty(), c.from_world != c.to_world);
    loaded[rank] = params_of(*b.model);
    train_toy(b, 10, 20);
    resumed[rank] = params_of(*b.model);
  });
  for (int r = 0; r < c.to_world; ++r) {
    expect_bitwise_equal(at_save, loaded[r], "parameters right after loading, rank " + std::to_string(r));
    const double rel = max_relative_difference(uninterrupted, resumed[r]);
    EXPECT_LT(rel, 1e-6) << "rank " << r << " after 10 more steps";
  }
}

INSTANTIATE_TEST_SUITE_P(Checkpoint, Reshard,
                         ::testing::Values(ReshardCase{4, 2, 0, 0}, ReshardCase{4, 2, 1, 1}, ReshardCase{4, 2, 2, 2},
                                           ReshardCase{2, 4, 0, 0}, ReshardCase{2, 4, 1, 1}, ReshardCase{2, 4, 2, 2},
                                           ReshardCase{4, 1, 0, 0}, ReshardCase{4, 1, 1, 1}, ReshardCase{4, 1, 2, 2},
                                           ReshardCase{1, 3, 0, 0}, ReshardCase{1, 3, 1, 1}, ReshardCase{1, 3, 2, 2},
                                           ReshardCase{2, 3, 2, 0}, ReshardCase{3, 2, 0, 1}),
                         reshard_case_name);

// A rank reads only the files that hold its slices: rank 0 of 2 at stage 2 needs files 0 and 1 of a
// 4-rank checkpoint, never 2 or 3.
TEST(CheckpointReshard, ReadsOnlyTheNeededRankFiles) {
  TempDir dir;
  run_ranks(4, [&](int, std::shared_ptr<Communicator> comm) {
    ToyRun a = make_toy_run(comm, {2, false, 7});
    checkpoint::save(*a.engine, toy_save_request(dir.path()));
  });
  const std::string step_dir = checkpoint::resolve_checkpoint(dir.path());
  const checkpoint::Manifest m = checkpoint::read_manifest(step_dir);
  checkpoint::ShardReader reader(step_dir, m);
  for (size_t u = 0; u < m.units.size(); ++u) {
    const int64_t half = m.units[u].padded_numel / 2;
    std::vector<float> buffer(half);
    reader.read("exp_avg", u, 0, half, buffer.data());
  }
  EXPECT_EQ(reader.opened_ranks(), (std::vector<int>{0, 1}));
}

}  // namespace
}  // namespace zest::testing
