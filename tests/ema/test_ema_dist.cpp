// The sharded EMA on N ranks (each rank averaging only its slice of the fp32 master, updated after every
// engine.step()) equals an EMA of the parameters of one process training with plain LibTorch AdamW on
// the same global batch, for every ZeRO stage; and it costs exactly what the master costs.
#include "comm/world.h"
#include "engine/engine.h"
#include "engine/memory_model.h"
#include "engine/toy_models.h"
#include "optim/ema.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

namespace zest::testing {
namespace {

constexpr int64_t kEmaGlobalBatch = 12;
constexpr int kEmaSteps = 12;

OptimConfig optim_config() {
  OptimConfig c;
  c.lr = 3e-3;
  c.weight_decay = 0.1;
  return c;
}

EmaConfig ema_config() {
  EmaConfig c;
  c.enabled = true;
  c.decay = 0.9;
  c.use_ema_warmup = true;  // the decay changes every step: a wrong step count shows
  c.update_every = 2;
  c.start_step = 1;
  return c;
}

using Named = std::map<std::string, torch::Tensor>;

// One process: LibTorch's AdamW (decay / no-decay groups) and diffusers' EMA step per parameter.
Named reference_ema() {
  auto model = std::make_shared<ToyNet>(/*seed=*/7);
  const OptimConfig cfg = optim_config();
  std::vector<torch::Tensor> decay, no_decay;
  std::vector<std::pair<std::string, torch::Tensor>> unique;
  std::set<const void*> seen;
  for (const auto& item : model->named_parameters()) {
    if (!seen.insert(item.value().unsafeGetTensorImpl()).second) continue;  // tied: listed twice in C++
    (no_decay_matches(cfg.no_decay, item.key()) ? no_decay : decay).push_back(item.value());
    unique.emplace_back(item.key(), item.value());
  }
  auto options = torch::optim::AdamWOptions(cfg.lr).betas({cfg.beta1, cfg.beta2}).eps(cfg.eps);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay, std::make_unique<torch::optim::AdamWOptions>(
                                 torch::optim::AdamWOptions(options).weight_decay(cfg.weight_decay)));
  groups.emplace_back(no_decay, std::make_unique<torch::optim::AdamWOptions>(
                                    torch::optim::AdamWOptions(options).weight_decay(0.0)));
  torch::optim::AdamW optimizer(groups, options);
  const EmaConfig ema = ema_config();
  Named shadow;
  for (const auto& [name, p] : unique) shadow[name] = p.detach().clone();
  for (int step = 1; step <= kEmaSteps; ++step) {
    optimizer.zero_grad();
    auto [x, y] = toy_batch(step - 1, kEmaGlobalBatch);
    torch::mse_loss(model->forward(x), y).backward();
    optimizer.step();
    if (step % ema.update_every != 0) continue;
    const double one_minus_decay = 1.0 - ema_decay_at(ema, step);
    const torch::NoGradGuard no_grad;
    for (const auto& [name, p] : unique) shadow[name].sub_(one_minus_decay * (shadow[name] - p));
  }
  return shadow;
}

// The full tensors of a [Σ owned] shard laid out like the master, by parameter name (collective).
Named gather_by_name(Engine& engine, const torch::Tensor& shard) {
  Named out;
  for (size_t u = 0; u < engine.units().size(); ++u) {
    const UnitLayout& layout = engine.units()[u].layout();
    const ElementSpan span = engine.units()[u].in_flat();
    torch::Tensor full = shard.narrow(0, span.begin, span.numel).contiguous();
    if (!engine.policy().owns_whole_units()) {
      torch::Tensor gathered = torch::empty({layout.padded_numel}, full.options());
      engine.comm().allgather(full, gathered)->wait();
      full = gathered;
    }
    for (const ParamSlot& slot : layout.slots)
      out[slot.name] = full.narrow(0, slot.offset, slot.numel).view(slot.shape).clone();
  }
  return out;
}

class DistEma : public ::testing::TestWithParam<int> {};

TEST_P(DistEma, ShardedEmaEqualsSingleProcessEma) {
  const int stage = GetParam();
  auto comm = world_communicator();
  auto model = std::make_shared<ToyNet>(/*seed=*/7);
  EngineConfig ec;
  ec.stage = stage;
  ec.precision = Precision::fp32;
  ec.reduce_dtype = Precision::fp32;
  Engine engine(model, ec, optim_config(), SchedulerConfig{}, comm);
  ShardedEma ema(ema_config(), engine.master_shard());
  const int64_t local = kEmaGlobalBatch / comm->size();
  for (int step = 0; step < kEmaSteps; ++step) {
    auto [x, y] = toy_batch(step, kEmaGlobalBatch);
    engine.backward(torch::mse_loss(model->forward(x.narrow(0, comm->rank() * local, local)),
                                    y.narrow(0, comm->rank() * local, local)));
    engine.step();
    const StepStats stats = engine.read_stats();
    ema.update(engine.master_shard(), torch::tensor(stats.applied_steps), torch::tensor(stats.skipped ? 0.0f : 1.0f));
  }
  // The engine's own EMA (updated on the device inside step()) is the same average.
  {
    auto model2 = std::make_shared<ToyNet>(/*seed=*/7);
    Engine engine2(model2, ec, optim_config(), SchedulerConfig{}, comm);
    engine2.enable_ema(ema_config());
    for (int step = 0; step < kEmaSteps; ++step) {
      auto [x, y] = toy_batch(step, kEmaGlobalBatch);
      engine2.backward(torch::mse_loss(model2->forward(x.narrow(0, comm->rank() * local, local)),
                                       y.narrow(0, comm->rank() * local, local)));
      engine2.step();
    }
    EXPECT_TRUE(engine2.ema()->shard().equal(ema.shard())) << "stage " << stage;
    EXPECT_EQ(engine2.model_state_bytes().ema, engine2.model_state_bytes().master);
  }
  const Named expected = reference_ema();
  const Named actual = gather_by_name(engine, ema.shard());
  ASSERT_EQ(expected.size(), actual.size());
  double worst = 0.0;
  for (const auto& [name, ref] : expected) {
    const torch::Tensor& got = actual.at(name);
    ASSERT_EQ(got.sizes(), ref.sizes()) << name;
    const double scale = std::max(ref.abs().max().item<double>(), 1e-3);
    worst = std::max(worst, (got - ref).abs().max().item<double>() / scale);
  }
  EXPECT_LE(worst, 1e-6) << "stage " << stage << ", " << comm->size() << " rank(s)";
  // The EMA moved away from the weights (so the comparison above is about averaging, not a copy).
  const Named params = gather_by_name(engine, engine.master_shard());
  EXPECT_GT((params.at("head.weight") - actual.at("head.weight")).abs().max().item<double>(), 1e-5);

  // Memory: exactly the master's bytes on this rank, and the formula's ema term equals its master term.
  EXPECT_EQ(ema.bytes(), engine.model_state_bytes().master);
  MemoryModelInputs in{engine.num_parameters(), comm->size(), stage, Precision::fp32, Precision::fp32, 8, true};
  const ModelStateBytes formula = estimate_model_state_bytes(in);
  EXPECT_EQ(formula.ema, formula.master);
  EXPECT_EQ(formula.ema, stage == 0 ? 4 * in.numel : 4 * in.numel / comm->size());
}

INSTANTIATE_TEST_SUITE_P(Stages, DistEma, ::testing::Values(0, 1, 2),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return "stage" + std::to_string(info.param);
                         });

}  // namespace
}  // namespace zest::testing
