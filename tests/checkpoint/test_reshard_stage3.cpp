// Checkpoints stay stage-agnostic with ZeRO-3 and optimizer offload: a stage-2 checkpoint resumes at stage 3 and back, at
// another world size, with bitwise-equal parameters right after loading and training that continues like
// the uninterrupted run (stage 3 keeps parameters sharded at rest: they are gathered before being read).
#include "ckpt_test_util.h"
#include "thread_world.h"

#include <gtest/gtest.h>

namespace zest::testing {
namespace {

struct Stage3Case {
  int from_world;
  int to_world;
  int from_stage;
  int to_stage;
  bool from_offload = false;  // optimizer offload on the saving / the loading side
  bool to_offload = false;
};

std::string stage3_case_name(const ::testing::TestParamInfo<Stage3Case>& info) {
  const Stage3Case& c = info.param;
  return "np" + std::to_string(c.from_world) + "s" + std::to_string(c.from_stage) + "_to_np" +
         std::to_string(c.to_world) + "s" + std::to_string(c.to_stage) + (c.from_offload ? "_from_offload" : "") +
         (c.to_offload ? "_to_offload" : "");
}

std::map<std::string, torch::Tensor> gathered_params(ToyRun& run) {
  run.engine->gather_all_params();
  return params_of(*run.model);
}

class ReshardStage3 : public ::testing::TestWithParam<Stage3Case> {};

TEST_P(ReshardStage3, ResumesAcrossStageThree) {
  const Stage3Case c = GetParam();
  TempDir dir;
  std::map<std::string, torch::Tensor> at_save, uninterrupted;
  run_ranks(c.from_world, [&](int rank, std::shared_ptr<Communicator> comm) {
    ToyRun a = make_toy_run(comm, {c.from_stage, false, 7, false, c.from_offload});
    train_toy(a, 0, 6);
    checkpoint::save(*a.engine, toy_save_request(dir.path()));
    const auto saved = gathered_params(a);
    train_toy(a, 6, 12);
    const auto later = gathered_params(a);
    if (rank == 0) at_save = saved, uninterrupted = later;
  });
  std::vector<std::map<std::string, torch::Tensor>> loaded(c.to_world), resumed(c.to_world);
  run_ranks(c.to_world, [&](int rank, std::shared_ptr<Communicator> comm) {
    ToyRun b = make_toy_run(comm, {c.to_stage, false, 99, false, c.to_offload});
    checkpoint::load(*b.engine, toy_load_request(dir.path()));
    loaded[rank] = gathered_params(b);
    train_toy(b, 6, 12);
    resumed[rank] = gathered_params(b);
  });
  for (int r = 0; r < c.to_world; ++r) {
    expect_bitwise_equal(at_save, loaded[r], "parameters right after loading, rank " + std::to_string(r));
    // The host optimizer's fused update rounds differently from ATen's op-by-op one (fp32 tolerance).
    const double tolerance = c.from_offload != c.to_offload ? 1e-5 : 1e-6;
    EXPECT_LT(max_relative_difference(uninterrupted, resumed[r]), tolerance) << "rank " << r << " after 6 more steps";
  }
}

INSTANTIATE_TEST_SUITE_P(Checkpoint, ReshardStage3,
                         ::testing::Values(Stage3Case{2, 2, 2, 3}, Stage3Case{2, 4, 3, 2}, Stage3Case{4, 2, 3, 3},
                                           Stage3Case{1, 3, 0, 3}, Stage3Case{3, 1, 3, 1},
                                           // Offloaded optimizer state is the same checkpoint state.
                                           Stage3Case{2, 2, 2, 2, false, true}, Stage3Case{2, 3, 3, 1, true, false},
                                           Stage3Case{1, 2, 1, 3, true, true}),
                         stage3_case_name);

}  // namespace
}  // namespace zest::testing
