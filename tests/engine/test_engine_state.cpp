// Engine::state() / load_state(): a second engine that loads the first's state holds the same parameters,
// shards and counters bit for bit (and keeps training identically); a state of another layout, or
// without an optimizer state, is refused with the engine untouched.
#include "comm/world.h"
#include "common/error_of.h"
#include "core/check.h"
#include "engine/engine.h"
#include "toy_models.h"

#include <gtest/gtest.h>

namespace zest::testing {
namespace {

constexpr int64_t kLocalBatch = 2;

struct StateRun {
  std::shared_ptr<ToyNet> model;
  std::unique_ptr<Engine> engine;
};

StateRun make_run(int64_t seed, std::shared_ptr<Communicator> comm) {
  EngineConfig ec;
  ec.device = DeviceKind::cpu;
  ec.stage = 2;
  ec.precision = Precision::fp32;
  OptimConfig oc;
  oc.lr = 1e-2;
  StateRun run{std::make_shared<ToyNet>(seed), nullptr};
  run.engine = std::make_unique<Engine>(run.model, ec, oc, SchedulerConfig{}, std::move(comm));
  EmaConfig ema;
  ema.enabled = true;
  ema.decay = 0.9;
  run.engine->enable_ema(ema);
  return run;
}

void train(StateRun& run, int64_t from, int64_t to) {
  Communicator& comm = run.engine->comm();
  for (int64_t step = from; step < to; ++step) {
    auto [x, y] = toy_batch(step, kLocalBatch * comm.size());
    const auto xr = x.narrow(0, comm.rank() * kLocalBatch, kLocalBatch);
    const auto yr = y.narrow(0, comm.rank() * kLocalBatch, kLocalBatch);
    run.engine->backward(torch::mse_loss(run.model->forward(xr), yr));
    run.engine->step();
  }
}

void expect_same_parameters(ToyNet& a, ToyNet& b) {
  const auto pa = a.named_parameters();
  const auto pb = b.named_parameters();
  for (const auto& item : pa) EXPECT_TRUE(torch::equal(item.value(), pb[item.key()])) << item.key();
}

TEST(DistEngineState, LoadStateReproducesTheEngineBitwise) {
  auto comm = world_communicator();
  StateRun a = make_run(1, comm);
  train(a, 0, 3);
  StateRun b = make_run(2, comm);  // other initial weights
  b.engine->load_state(a.engine->state());

  expect_same_parameters(*a.model, *b.model);
  const EngineState sa = a.engine->state();
  const EngineState sb = b.engine->state();
  ASSERT_EQ(sa.shard_names(), sb.shard_names());
  for (size_t k = 0; k < sa.shards.size(); ++k)
    EXPECT_TRUE(torch::equal(sa.shards[k].flat, sb.shards[k].flat)) << sa.shards[k].name;
  EXPECT_EQ(sb.counters.step, 3);
  EXPECT_EQ(sb.counters.optimizer_step, sa.counters.optimizer_step);
  EXPECT_EQ(sb.counters.lr, sa.counters.lr);
  EXPECT_EQ(sb.tomls().optimizer, sa.tomls().optimizer);

  train(a, 3, 5);  // the same state trains the same
  train(b, 3, 5);
  expect_same_parameters(*a.model, *b.model);
  EXPECT_TRUE(torch::equal(a.engine->ema()->shard(), b.engine->ema()->shard()));
}

TEST(DistEngineState, LoadStateRefusesAnotherLayout) {
  auto comm = world_communicator();
  StateRun a = make_run(1, comm);
  EngineConfig ec;
  ec.device = DeviceKind::cpu;
  ec.precision = Precision::fp32;
  Engine other(std::make_shared<ElementwiseNet>(3), ec, OptimConfig{}, SchedulerConfig{}, comm);
  const auto before = other.master_shard().clone();

  const std::string wrong_model = error_of([&] { other.load_state(a.engine->state()); });
  EXPECT_NE(wrong_model.find("load_state: the state has 4 unit(s), this engine 2"), std::string::npos)
      << wrong_model;

  EngineState without_moment = a.engine->state();
  without_moment.shards.erase(without_moment.shards.begin() + 1);  // the optimizer's first state
  const std::string missing = error_of([&] { a.engine->load_state(without_moment); });
  EXPECT_NE(missing.find("load_state: the state has no 'exp_avg' shard"), std::string::npos) << missing;

  EngineState renamed = a.engine->state();
  renamed.units[1].layout.name = "blocks.7";
  const std::string unit = error_of([&] { a.engine->load_state(renamed); });
  EXPECT_NE(unit.find("load_state: unit 1 is 'blocks.0' here, 'blocks.7' in the state"), std::string::npos) << unit;
  EXPECT_TRUE(torch::equal(other.master_shard(), before));  // refused before anything was copied
}

}  // namespace
}  // namespace zest::testing
