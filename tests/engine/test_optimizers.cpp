// The optimizers as declared in optim/optimizers.h: Lion on the CPU against an independent float64
// reference of its closed form; every declared optimizer's description (state names, bytes per element)
// as its built optimizer reports them; a skipped step changes nothing; and the CPU and offloaded paths
// train to the same master and state (bitwise where both run the rule's host pass).
#include "comm/world.h"
#include "engine/engine.h"
#include "optimizer_harness.h"
#include "toy_models.h"

#include <gtest/gtest.h>

namespace zest::testing {
namespace {

OptimConfig lion_config() {
  OptimConfig c;
  c.name = OptimizerKind::lion;
  c.lr = 1e-3;
  c.beta1 = 0.9;
  c.beta2 = 0.99;
  c.weight_decay = 0.1;
  return c;
}

// Lion in float64 with ATen ops, written from the paper's update: per step
// c = β1·m + (1−β1)·g; p ← p·(1 − lr·wd) − lr·sign(c); m ← β2·m + (1−β2)·g.
struct LionReference {
  torch::Tensor p, m, wd;  // float64; wd per element (0 where excluded)
  void step(const torch::Tensor& grad, double lr, double beta1, double beta2) {
    const auto g = grad.to(torch::kFloat64);
    const auto c = beta1 * m + (1 - beta1) * g;
    p = p * (1 - lr * wd) - lr * torch::sign(c);
    m = beta2 * m + (1 - beta2) * g;
  }
};

TEST(LionOptimizer, MatchesTheFloat64ClosedForm) {
  const OptimConfig config = lion_config();
  constexpr int64_t n1 = 301, n2 = 200;
  constexpr double kMultiplier = 0.5;
  OptimizerBench b = make_bench(config, n1, n2, torch::kCPU);
  auto wd = torch::zeros({n1 + n2}, torch::kFloat64);
  wd.narrow(0, 0, n1 / 2).fill_(config.weight_decay);   // each segment's first half decays
  wd.narrow(0, n1, n2 / 2).fill_(config.weight_decay);
  LionReference ref{b.master.to(torch::kFloat64), torch::zeros({n1 + n2}, torch::kFloat64), wd};
  LionReference swapped = ref;  // β1 and β2 exchanged: what a mix-up of the two would compute
  for (int64_t t = 1; t <= 6; ++t) {
    b.grad.copy_(torch::randn({n1 + n2}));
    set_step(b, config, t, config.lr, kMultiplier);
    b.optimizer->step();
    ref.step(b.grad * kMultiplier, config.lr, config.beta1, config.beta2);
    swapped.step(b.grad * kMultiplier, config.lr, config.beta2, config.beta1);
  }
  // Each step moves an element by exactly ±lr (or 0) plus the decay: a wrong sign anywhere is 2·lr off.
  EXPECT_LT((b.master.to(torch::kFloat64) - ref.p).abs().max().item<double>(), 1e-6);
  const auto state = b.optimizer->state_tensors();
  ASSERT_EQ(state.size(), 1u);
  EXPECT_EQ(state[0].first, "exp_avg");
  EXPECT_LT((state[0].second.to(torch::kFloat64) - ref.m).abs().max().item<double>(), 1e-6);
  EXPECT_TRUE(b.param.equal(b.master));  // fp32 parameters: the master written back
  // The comparison has the power to see a β1/β2 mix-up.
  EXPECT_GT((swapped.p - ref.p).abs().max().item<double>(), 1e-3);
}

// Decay applies only to the decay ranges, and exactly as p·(1 − lr·wd) on the first step (m = 0: the
// update is lr·sign(g)).
TEST(LionOptimizer, FirstStepIsLrTimesTheGradientSign) {
  const OptimConfig config = lion_config();
  OptimizerBench b = make_bench(config, 64, 64, torch::kCPU);
  const auto before = b.master.clone();
  set_step(b, config, 1, config.lr, 1.0);
  b.optimizer->step();
  const auto lr = static_cast<float>(config.lr);
  const auto decayed = before * (1.0f - lr * static_cast<float>(config.weight_decay)) - lr * torch::sign(b.grad);
  const auto plain = before - lr * torch::sign(b.grad);
  EXPECT_TRUE(b.master.narrow(0, 0, 32).equal(decayed.narrow(0, 0, 32)));
  EXPECT_TRUE(b.master.narrow(0, 32, 32).equal(plain.narrow(0, 32, 32)));
  EXPECT_TRUE(b.master.narrow(0, 64, 32).equal(decayed.narrow(0, 64, 32)));
  EXPECT_TRUE(b.master.narrow(0, 96, 32).equal(plain.narrow(0, 96, 32)));
}

OptimConfig config_of(OptimizerKind kind) {
  OptimConfig c;
  c.name = kind;
  c.beta1 = optimizer_spec(kind).default_beta1;
  c.beta2 = optimizer_spec(kind).default_beta2;
  c.lr = kind == OptimizerKind::sgd ? 0.01 : 3e-3;
  c.weight_decay = 0.1;
  return c;
}

TEST(OptimizerDescriptions, EveryOptimizerBuildsWhatItsDescriptionSays) {
  ASSERT_EQ(optimizer_specs().size(), std::size(kOptimizerKinds));
  for (const OptimizerSpec& spec : optimizer_specs()) {
    OptimizerBench b = make_bench(config_of(spec.kind), 10, 6, torch::kCPU);
    std::vector<std::string> names;
    for (const auto& [name, tensor] : b.optimizer->state_tensors()) {
      names.push_back(name);
      EXPECT_EQ(tensor.scalar_type(), torch::kFloat32) << spec.name;
      EXPECT_EQ(tensor.numel(), 16) << spec.name;
    }
    EXPECT_EQ(names, spec.states) << spec.name;
    EXPECT_EQ(std::string(to_string(spec.kind)), spec.name);
  }
  OptimConfig sgd = config_of(OptimizerKind::sgd);
  EXPECT_EQ(optimizer_state_bytes_per_element(config_of(OptimizerKind::adamw)), 8);
  EXPECT_EQ(optimizer_state_bytes_per_element(sgd), 4);
  sgd.momentum = 0.0;
  EXPECT_EQ(optimizer_state_bytes_per_element(sgd), 0);
  EXPECT_EQ(optimizer_state_bytes_per_element(lion_config()), 4);
  EXPECT_EQ(optimizer_spec(OptimizerKind::lion).states, std::vector<std::string>{"exp_avg"});
}

TEST(OptimizerDescriptions, SkippedStepChangesNothing) {
  for (const OptimizerKind kind : kOptimizerKinds) {
    OptimizerBench b = make_bench(config_of(kind), 10, 6, torch::kCPU);
    set_step(b, config_of(kind), 1, 1e-2, 1.0);
    b.optimizer->step();  // state away from zero
    const auto master = b.master.clone();
    const auto state = b.optimizer->state_tensors()[0].second.clone();
    set_step(b, config_of(kind), 2, 1e-2, 1.0);
    auto scalars = b.scalars.clone();
    reinterpret_cast<StepScalars*>(scalars.data_ptr<double>())->skip = 1.0;
    b.scalars.copy_(scalars);
    b.optimizer->step();
    EXPECT_TRUE(b.master.equal(master)) << to_string(kind);
    EXPECT_TRUE(b.optimizer->state_tensors()[0].second.equal(state)) << to_string(kind);
  }
}

// Trains ToyNet at stage 2 on the CPU for a few steps; returns the master shard and the state tensors.
std::vector<torch::Tensor> train_toy(const OptimConfig& config, bool offload, Precision precision) {
  auto model = std::make_shared<ToyNet>(7);
  EngineConfig ec;
  ec.stage = 2;
  ec.device = DeviceKind::cpu;
  ec.precision = precision;
  ec.reduce_dtype = precision;
  ec.clip_norm = 0.5;
  ec.offload_optimizer = offload ? OffloadTarget::cpu : OffloadTarget::none;
  ec.offload_staging_mb = 1024.0 / (1 << 20);  // many pieces per unit: the ring wraps within a step
  Engine engine(model, ec, config, SchedulerConfig{}, world_communicator());
  for (int step = 0; step < 5; ++step) {
    auto [x, y] = toy_batch(step, 12);
    engine.backward(torch::mse_loss(model->forward(x).to(torch::kFloat32), y));
    engine.step();
  }
  std::vector<torch::Tensor> out{engine.master_shard().clone()};
  for (const auto& [name, tensor] : engine.optimizer().state_tensors()) out.push_back(tensor.clone());
  return out;
}

// AdamW and SGD keep their ATen-op forms on the CPU (optim/cpu_optimizers.cpp): there the two paths agree
// to fp32 rounding. Every other rule runs the same host pass on both paths: bitwise.
TEST(OptimizerPaths, CpuAndOffloadedAgreeForEveryOptimizer) {
  for (const OptimizerKind kind : kOptimizerKinds) {
    const bool aten_form = kind == OptimizerKind::adamw || kind == OptimizerKind::sgd;
    for (const Precision precision : {Precision::fp32, Precision::bf16}) {
      if (aten_form && precision == Precision::bf16) continue;  // bf16 rounding flips make it a loose bound
      const auto on_cpu = train_toy(config_of(kind), false, precision);
      const auto offloaded = train_toy(config_of(kind), true, precision);
      ASSERT_EQ(on_cpu.size(), offloaded.size());
      for (size_t i = 0; i < on_cpu.size(); ++i) {
        const std::string what = std::string(to_string(kind)) + " " + to_string(precision) + " tensor " + std::to_string(i);
        if (aten_form) {
          const double scale = on_cpu[i].abs().max().item<double>();
          EXPECT_LE((on_cpu[i] - offloaded[i]).abs().max().item<double>(), 1e-4 * scale) << what;
        } else {
          EXPECT_TRUE(on_cpu[i].equal(offloaded[i])) << what;
        }
      }
      // Training filled the state: the comparison is not of two untouched zero buffers.
      EXPECT_GT(on_cpu.at(1).abs().sum().item<double>(), 0.0) << to_string(kind);
    }
  }
}

}  // namespace
}  // namespace zest::testing
