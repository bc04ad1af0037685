// Exact resume: 10 steps + save + 10 steps equals (bitwise, CPU fp32) a fresh process-like run that
// loads the checkpoint and trains the last 10 — parameters, optimizer state, step counts, LR, loss
// scale, and the caller's data position / per-rank RNG state. Synchronous and asynchronous saves.
#include "ckpt_test_util.h"
#include "thread_world.h"

#include <gtest/gtest.h>

#include <set>

namespace zest::testing {
namespace {

struct ResumeCase {
  int world_size;
  int stage;
  bool sgd;
  bool async;
};

void PrintTo(const ResumeCase& c, std::ostream* os) {
  *os << "np" << c.world_size << " stage " << c.stage
      << (c.sgd ? " sgd" : " adamw") << (c.async ? " async" : " sync");
}

std::string resume_case_name(const ::testing::TestParamInfo<ResumeCase>& info) {
  const ResumeCase& c = info.param;
  return "np" + std::to_string(c.world_size) + "_stage" + std::to_string(c.stage) + (c.sgd ? "_sgd" : "_adamw") +
         (c.async ? "_async" : "_sync");
}

class ExactResume : public ::testing::TestWithParam<ResumeCase> {};

TEST_P(ExactResume, TenPlusTenEqualsLoadPlusTen) {
  const ResumeCase c = GetParam();
  TempDir dir;
  std::vector<std::map<std::string, torch::Tensor>> uninterrupted(c.world_size), resumed(c.world_size);
  std::vector<std::map<std::string, torch::Tensor>> params_a(c.world_size), params_b(c.world_size);
  run_ranks(c.world_size, [&](int rank, std::shared_ptr<Communicator> comm) {
    ToyRun a = make_toy_run(comm, {c.stage, c.sgd, 7});
    train_toy(a, 0, 10);
    auto request = toy_save_request(dir.path());
    request.async = c.async;
    request.extra_json = R"({"data": {"next_batch": 10, "epoch": 0}})";
    request.rank_extra_json = "{\"rng\": \"state-of-rank-" + std::to_string(rank) + "\"}";
    checkpoint::Saver saver;
    saver.save(*a.engine, request);
    // Training goes on while an asynchronous save writes; its contents are still the step-10 state.
    for (int64_t step = 10; step < 20; ++step) {
      train_toy(a, step, step + 1);
      saver.poll(*comm);
    }
    saver.wait(*comm);
    uninterrupted[rank] = engine_state(*a.engine);
    params_a[rank] = params_of(*a.model);

    ToyRun b = make_toy_run(comm, {c.stage, c.sgd, 99});
    const auto loaded = checkpoint::load(*b.engine, toy_load_request(dir.path()));
    EXPECT_EQ(loaded.step, 10);
    EXPECT_EQ(loaded.extra_json, R"({"data":{"next_batch":10,"epoch":0}})");
    EXPECT_EQ(loaded.rank_extra_json, "{\"rng\":\"state-of-rank-" + std::to_string(rank) + "\"}");
    EXPECT_EQ(b.engine->step_count(), 10);
    train_toy(b, loaded.step, 20);
    resumed[rank] = engine_state(*b.engine);
    params_b[rank] = params_of(*b.model);
  });
  for (int r = 0; r < c.world_size; ++r) {
    expect_bitwise_equal(uninterrupted[r], resumed[r], "engine state of rank " + std::to_string(r));
    expect_bitwise_equal(params_a[r], params_b[r], "parameters of rank " + std::to_string(r));
  }
}

INSTANTIATE_TEST_SUITE_P(Checkpoint, ExactResume,
                         ::testing::Values(ResumeCase{1, 0, false, false}, ResumeCase{1, 2, false, true},
                                           ResumeCase{1, 1, true, false}, ResumeCase{2, 0, false, false},
                                           ResumeCase{2, 1, false, true}, ResumeCase{2, 2, false, false},
                                           ResumeCase{2, 2, true, true}, ResumeCase{3, 2, false, true}),
                         resume_case_name);

// fp16: the dynamic loss scaler's state (scale, clean-step count, hysteresis) survives a resume.
TEST(CheckpointResume, Fp16LossScalerStateIsRestored) {
  TempDir dir;
  run_ranks(2, [&](int rank, std::shared_ptr<Communicator> comm) {
    auto make = [&](int64_t seed) {
      EngineConfig ec;
      ec.stage = 2;
      ec.precision = Precision::fp16;
      ec.loss_scale.initial = 1024.0;
      ec.loss_scale.window = 4;
      auto model = std::make_shared<ElementwiseNet>(seed);
      return std::make_pair(model, std::make_unique<Engine>(model, ec, toy_optim(false), toy_schedule(), comm));
    };
    auto train = [&](auto& run, int64_t first, int64_t last) {
      for (int64_t step = first; step < last; ++step) {
        auto gen = at::detail::createCPUGenerator(500 + step);
        auto x = at::randn({4, 6}, gen).narrow(0, 2 * rank, 2);
        run.second->backward((run.first->forward(x) - 1.0).pow(2).mean());
        run.second->step();
      }
    };
    auto a = make(3);
    train(a, 0, 6);  // two doublings of the scale (window 4) happen around here
    checkpoint::save(*a.second, toy_save_request(dir.path()));
    const LossScalerState saved = a.second->loss_scaler().state();
    train(a, 6, 12);
    auto b = make(4);
    checkpoint::load(*b.second, toy_load_request(dir.path()));
    EXPECT_EQ(b.second->loss_scaler().state().scale, saved.scale);
    EXPECT_EQ(b.second->loss_scaler().state().clean_steps, saved.clean_steps);
    train(b, 6, 12);
    EXPECT_TRUE(torch::equal(a.second->master_shard(), b.second->master_shard()));
    EXPECT_EQ(a.second->loss_scaler().scale(), b.second->loss_scaler().scale());
  });
}

// Every counter a checkpoint carries (iterations, optimizer updates, skipped steps, the fp16 scaler's
// scale, clean steps, hysteresis and overflow count, and the learning rate that follows from them) is the
// uninterrupted run's after a resume, and stays so while both runs go on: overflows before and after the
// save (on one rank only), a save right after a skipped step, hysteresis 2 so its count is mid-way.
TEST(CheckpointResume, EveryCounterEqualsTheUninterruptedRun) {
  TempDir dir;
  const std::set<int64_t> overflow_steps = {1, 3, 5, 8};
  constexpr int64_t kSaveAt = 6, kEnd = 11;
  run_ranks(2, [&](int rank, std::shared_ptr<Communicator> comm) {
    auto make = [&](int64_t seed) {
      EngineConfig ec;
      ec.stage = 2;
      ec.precision = Precision::fp16;
      ec.loss_scale.initial = 1024.0;
      ec.loss_scale.window = 3;
      ec.loss_scale.hysteresis = 2;
      auto model = std::make_shared<ElementwiseNet>(seed);
      return std::make_pair(model, std::make_unique<Engine>(model, ec, toy_optim(false), toy_schedule(), comm));
    };
    auto train = [&](auto& run, int64_t first, int64_t last) {
      for (int64_t step = first; step < last; ++step) {
        auto gen = at::detail::createCPUGenerator(700 + step);
        auto x = at::randn({4, 6}, gen).narrow(0, 2 * rank, 2);
        auto loss = (run.first->forward(x) - 1.0).pow(2).mean();
        if (overflow_steps.count(step) && rank == 1) loss = loss * 1e30;  // fp16 gradients overflow here
        run.second->backward(loss);
        run.second->step();
        EXPECT_EQ(run.second->read_stats().skipped, overflow_steps.count(step) == 1) << "step " << step;
      }
    };
    auto a = make(3);
    train(a, 0, kSaveAt);
    checkpoint::save(*a.second, toy_save_request(dir.path()));
    const auto saved = counters_of(*a.second);
    EXPECT_EQ(saved.at("skipped_total"), 3.0);  // the test exercises what it claims
    EXPECT_EQ(saved.at("hysteresis_left"), 1.0);
    train(a, kSaveAt, kEnd);

    auto b = make(4);
    checkpoint::load(*b.second, toy_load_request(dir.path()));
    EXPECT_EQ(counters_of(*b.second), saved) << "right after the load";
    train(b, kSaveAt, kEnd);
    EXPECT_EQ(counters_of(*b.second), counters_of(*a.second)) << "at the end";
    const StepStats sa = a.second->read_stats(), sb = b.second->read_stats();
    EXPECT_EQ(sb.skipped_total, sa.skipped_total);
    EXPECT_EQ(sb.applied_steps, sa.applied_steps);
    EXPECT_EQ(sb.lr, sa.lr);
    EXPECT_TRUE(torch::equal(a.second->master_shard(), b.second->master_shard()));
  });
}

}  // namespace
}  // namespace zest::testing
