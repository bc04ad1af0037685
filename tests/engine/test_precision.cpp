// Mixed precision: the fp16 loss scaler (overflow on one rank skips the step everywhere, halves the
// scale, leaves parameters untouched; the scale grows after the window), bf16/fp16 runs tracking the fp32
// run within stated tolerances for both reduce dtypes, and the non-finite stop for bf16/fp32.
#include "comm/world.h"
#include "engine/engine.h"
#include "engine/step_scalars.h"
#include "cpu_engine_config.h"
#include "toy_models.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <type_traits>

namespace zest::testing {
namespace {

std::vector<torch::Tensor> snapshot(torch::nn::Module& m) {
  std::vector<torch::Tensor> out;
  for (auto& p : m.parameters()) out.push_back(p.detach().to(torch::kFloat32).clone());
  return out;
}

bool same(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  for (size_t i = 0; i < a.size(); ++i)
    if (!a[i].equal(b[i])) return false;
  return true;
}

// max |a - b| / max |b| over all parameters.
double relative_difference(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  double worst = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double scale = std::max(b[i].abs().max().item<double>(), 1e-3);
    worst = std::max(worst, (a[i] - b[i]).abs().max().item<double>() / scale);
  }
  return worst;
}

TEST(DistFp16, OverflowOnOneRankSkipsEverywhereAndScaleRecovers) {
  auto comm = world_communicator();
  auto model = std::make_shared<ElementwiseNet>(3);
  EngineConfig ec = cpu_config(2, Precision::fp16);
  ec.loss_scale.initial = 1024;
  ec.loss_scale.window = 3;
  OptimConfig oc;
  oc.lr = 1e-2;
  Engine engine(model, ec, oc, SchedulerConfig{}, comm);
  EXPECT_EQ(model->w1.scalar_type(), torch::kHalf);
  EXPECT_EQ(engine.master_shard().scalar_type(), torch::kFloat32);

  auto x = torch::randn({4, 6}, at::detail::createCPUGenerator(comm->rank()));
  auto loss_for = [&](bool poison) {
    auto loss = model->forward(x).to(torch::kFloat32).pow(2).mean();
    return poison ? loss * 1e30 : loss;  // 1e30 overflows fp16 gradients on this rank only
  };
  engine.backward(loss_for(false));
  engine.step();
  EXPECT_FALSE(engine.read_stats().skipped);
  const auto before = snapshot(*model);
  const double scale_before = engine.loss_scaler().scale();
  engine.backward(loss_for(comm->rank() == comm->size() - 1));
  engine.step();
  const auto stats = engine.read_stats();
  EXPECT_TRUE(stats.skipped);  // on every rank
  EXPECT_EQ(stats.skipped_total, 1);
  EXPECT_EQ(stats.loss_scale, scale_before);  // the scale this step used
  EXPECT_DOUBLE_EQ(engine.loss_scaler().scale(), scale_before / 2);
  EXPECT_TRUE(same(before, snapshot(*model)));  // parameters unchanged
  EXPECT_EQ(stats.applied_steps, 1);            // Adam's step count did not advance
  EXPECT_EQ(engine.optimizer().step_count(), 1);
  EXPECT_EQ(engine.step_count(), 2);            // iterations count the skipped one
  for (int i = 0; i < 3; ++i) {  // the window of clean steps doubles the scale again
    engine.backward(loss_for(false));
    engine.step();
    EXPECT_FALSE(engine.read_stats().skipped);
  }
  EXPECT_DOUBLE_EQ(engine.loss_scaler().scale(), scale_before);
  EXPECT_FALSE(same(before, snapshot(*model)));
}

TEST(LossScaling, HysteresisFloorAndGrowth) {
  StepRules r;
  r.loss_scaling = 1.0;
  r.scale_window = 2;
  r.scale_hysteresis = 2;
  r.scale_min = 2;
  StepScalars s;
  s.loss_scale = 8;
  s.hysteresis_left = 2;
  EXPECT_FALSE(advance_loss_scale(r, s, true));  // first overflow tolerated by hysteresis
  EXPECT_EQ(s.loss_scale, 8);
  EXPECT_FALSE(advance_loss_scale(r, s, true));  // second halves
  EXPECT_EQ(s.loss_scale, 4);
  advance_loss_scale(r, s, true);
  advance_loss_scale(r, s, true);
  EXPECT_EQ(s.loss_scale, 2);  // floor reached
  advance_loss_scale(r, s, true);
  EXPECT_TRUE(advance_loss_scale(r, s, true));  // overflow at the floor is reported
  EXPECT_EQ(s.loss_scale, 2);
  advance_loss_scale(r, s, false);
  advance_loss_scale(r, s, false);
  EXPECT_EQ(s.loss_scale, 4);  // window of clean steps doubles
  StepRules off;
  StepScalars t;
  EXPECT_FALSE(advance_loss_scale(off, t, true));
  EXPECT_EQ(t.loss_scale, 1);
}

// Hysteresis over a sequence of clean steps (+) and overflows (x), with window 2, hysteresis 2, floor 1:
// every change of the scale (growth as well as halving) gives back the full hysteresis, and a clean step
// alone does not. Each row is the state after the event.
TEST(LossScaling, HysteresisIsRefilledWhenTheScaleChanges) {
  StepRules r;
  r.loss_scaling = 1.0;
  r.scale_window = 2;
  r.scale_hysteresis = 2;
  r.scale_min = 1;
  StepScalars s;
  s.loss_scale = 16;
  s.hysteresis_left = 2;
  struct Row {
    bool overflow;
    double scale, clean_steps, hysteresis_left, overflows;
  };
  const Row rows[] = {
      {true, 16, 0, 1, 1},   // tolerated
      {false, 16, 1, 1, 1},  // a clean step does not refill
      {false, 32, 0, 2, 1},  // the window grows the scale and refills
      {true, 32, 0, 1, 2},   // tolerated again: the growth gave back both
      {true, 16, 0, 2, 3},   // halved, refilled
      {false, 16, 1, 2, 3},
      {true, 16, 0, 1, 4},   // an overflow restarts the window
      {false, 16, 1, 1, 4},
      {false, 32, 0, 2, 4},
      {false, 32, 1, 2, 4},
      {false, 64, 0, 2, 4},
      {true, 64, 0, 1, 5},
      {true, 32, 0, 2, 6},
  };
  int event = 0;
  for (const Row& row : rows) {
    EXPECT_FALSE(advance_loss_scale(r, s, row.overflow));
    const std::string where = "event " + std::to_string(event++) + (row.overflow ? " (overflow)" : " (clean)");
    EXPECT_EQ(s.loss_scale, row.scale) << where;
    EXPECT_EQ(s.clean_steps, row.clean_steps) << where;
    EXPECT_EQ(s.hysteresis_left, row.hysteresis_left) << where;
    EXPECT_EQ(s.overflows, row.overflows) << where;
  }
}

// The same rule through the engine: fp16 steps with the window 2 and hysteresis 2, overflows forced on
// chosen steps; the scale each step used and the scaler's state afterwards follow the table above.
TEST(DistFp16, HysteresisOverGrowAndOverflowSequences) {
  auto comm = world_communicator();
  auto model = std::make_shared<ElementwiseNet>(5);
  EngineConfig ec = cpu_config(2, Precision::fp16);
  ec.loss_scale.initial = 16;
  ec.loss_scale.window = 2;
  ec.loss_scale.hysteresis = 2;
  ec.loss_scale.min = 1;
  Engine engine(model, ec, OptimConfig{}, SchedulerConfig{}, comm);
  auto x = torch::randn({4, 6}, at::detail::createCPUGenerator(comm->rank()));
  //                          x      +      +      x      x      +      x
  const bool overflow[] = {true, false, false, true, true, false, true};
  const double used[] = {16, 16, 16, 32, 32, 16, 16};
  const double after[] = {16, 16, 32, 32, 16, 16, 16};
  const int hysteresis_after[] = {1, 1, 2, 1, 2, 2, 1};
  for (int step = 0; step < 7; ++step) {
    auto loss = model->forward(x).to(torch::kFloat32).pow(2).mean();
    // The overflow on one rank only: every rank skips and the scalers stay identical.
    if (overflow[step] && comm->rank() == comm->size() - 1) loss = loss * 1e30;
    engine.backward(loss);
    engine.step();
    const StepStats stats = engine.read_stats();
    EXPECT_EQ(stats.skipped, overflow[step]) << "step " << step;
    EXPECT_EQ(stats.loss_scale, used[step]) << "step " << step;
    const LossScalerState state = engine.loss_scaler().state();
    EXPECT_EQ(state.scale, after[step]) << "step " << step;
    EXPECT_EQ(state.hysteresis_left, hysteresis_after[step]) << "step " << step;
  }
  EXPECT_EQ(engine.loss_scaler().state().overflows, 4);
}

TEST(DistFp16, AtMinErrorStopsTheRunNamingTheTensor) {
  auto comm = world_communicator();
  auto model = std::make_shared<ElementwiseNet>(3);
  EngineConfig ec = cpu_config(1, Precision::fp16);
  ec.loss_scale.initial = 4;
  ec.loss_scale.min = 2;
  ec.loss_scale.at_min = AtMinScale::error;
  Engine engine(model, ec, OptimConfig{}, SchedulerConfig{}, comm);
  auto x = torch::randn({4, 6});
  auto poisoned = [&] { return model->forward(x).to(torch::kFloat32).pow(2).mean() * 1e30; };
  engine.backward(poisoned());
  engine.step();
  EXPECT_TRUE(engine.read_stats().skipped);  // 4 → 2
  engine.backward(poisoned());
  try {
    engine.step();
    FAIL() << "expected the run to stop at the minimum loss scale";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("loss scale is at its minimum"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("w1 (unit first)"), std::string::npos) << e.what();
  }
}

TEST(DistBf16, LossFallsAndMasterStaysFp32) {
  auto comm = world_communicator();
  auto model = std::make_shared<ToyNet>(11);
  OptimConfig oc;
  oc.lr = 1e-2;
  Engine engine(model, cpu_config(2, Precision::bf16), oc, SchedulerConfig{}, comm);
  EXPECT_EQ(model->embed->weight.scalar_type(), torch::kBFloat16);
  EXPECT_EQ(engine.master_shard().scalar_type(), torch::kFloat32);
  auto [x, y] = toy_batch(0, 64);
  double first = 0, last = 0;
  for (int step = 0; step < 60; ++step) {
    auto loss = torch::mse_loss(model->forward(x).to(torch::kFloat32), y);
    if (step == 0) first = loss.item<double>();
    last = loss.item<double>();
    engine.backward(loss);
    engine.step();
  }
  EXPECT_FALSE(engine.read_stats().skipped);
  EXPECT_LT(last, 0.5 * first) << "first " << first << " last " << last;
}

// Trains `model_seed`'s model for a few SGD steps (linear in the gradient, so a wrong scale shows) in the
// given precision and returns the fp32 master copy of every parameter, gathered from the shards.
template <typename Net>
std::vector<torch::Tensor> train_few_steps(Precision precision, Precision reduce, int stage, int64_t model_seed) {
  auto comm = world_communicator();
  auto model = std::make_shared<Net>(model_seed);
  EngineConfig ec = cpu_config(stage, precision, reduce);
  ec.accumulation_steps = 2;
  ec.loss_scale.initial = 256;  // no overflow here: the runs stay comparable step by step
  OptimConfig oc;
  oc.name = OptimizerKind::sgd;
  oc.lr = 0.02;
  oc.momentum = 0.5;
  Engine engine(model, ec, oc, SchedulerConfig{}, comm);
  for (int step = 0; step < 8; ++step) {
    auto [x, y] = toy_batch(step, 16);
    x = x.narrow(0, comm->rank() * (16 / comm->size()), 16 / comm->size());
    for (int m = 0; m < 2; ++m) {
      auto xm = x.narrow(0, m * x.size(0) / 2, x.size(0) / 2);
      if constexpr (std::is_same_v<Net, ElementwiseNet>) xm = xm.narrow(1, 0, 6);  // it takes 6 features
      auto out = model->forward(xm).to(torch::kFloat32);
      engine.backward(out.pow(2).mean());
    }
    engine.step();
  }
  EXPECT_FALSE(engine.read_stats().skipped);
  engine.gather_all_params();
  return snapshot(*model);
}

// bf16 parameters (8 significant bits) round each update to ~0.4%: after 8 steps the bf16 run stays
// within 3% of the fp32 one; a dropped or doubled scale factor is off by 50% or more.
TEST(DistBf16, TracksFp32WithinTolerance) {
  for (int stage : {0, 2, 3}) {
    const auto fp32 = train_few_steps<ToyNet>(Precision::fp32, Precision::fp32, stage, 21);
    for (Precision reduce : {Precision::fp32, Precision::bf16}) {
      const auto bf16 = train_few_steps<ToyNet>(Precision::bf16, reduce, stage, 21);
      EXPECT_LT(relative_difference(bf16, fp32), 3e-2) << "stage " << stage << " reduce " << to_string(reduce);
    }
  }
}

// fp16 (11 significant bits) with dynamic loss scaling: within 1% of fp32 (ElementwiseNet: CPU fp16 kernels
// exist for its elementwise ops only).
TEST(DistFp16, TracksFp32WithinTolerance) {
  for (int stage : {1, 2}) {
    const auto fp32 = train_few_steps<ElementwiseNet>(Precision::fp32, Precision::fp32, stage, 5);
    for (Precision reduce : {Precision::fp32, Precision::fp16}) {
      const auto fp16 = train_few_steps<ElementwiseNet>(Precision::fp16, reduce, stage, 5);
      EXPECT_LT(relative_difference(fp16, fp32), 1e-2) << "stage " << stage << " reduce " << to_string(reduce);
    }
  }
}

TEST(DistNonFinite, SkipsThenStopsNamingTheTensor) {
  auto comm = world_communicator();
  auto model = std::make_shared<ToyNet>(5);
  EngineConfig ec = cpu_config(2, Precision::fp32);
  ec.max_nonfinite_steps = 2;
  Engine engine(model, ec, OptimConfig{}, SchedulerConfig{}, comm);
  auto [x, y] = toy_batch(0, 8);
  auto nan_loss = [&] { return torch::mse_loss(model->forward(x), y) * std::numeric_limits<double>::quiet_NaN(); };
  engine.backward(nan_loss());
  engine.step();
  EXPECT_TRUE(engine.read_stats().skipped);
  engine.backward(nan_loss());
  try {
    engine.step();
    FAIL() << "expected a stop after 2 non-finite steps";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("consecutive steps had non-finite gradients"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("embed.weight"), std::string::npos) << e.what();
  }
}

// [engine] optimizer_in_backward: a bucket whose gradient is non-finite is not updated while the others of
// the step are; the step counts as skipped, and consecutive ones stop the run naming the tensor.
TEST(DistNonFinite, InBackwardKeepsTheNonFiniteBucketAndStops) {
  auto comm = world_communicator();
  auto model = std::make_shared<ToyNet>(5);
  EngineConfig ec = cpu_config(2, Precision::fp32);
  ec.max_nonfinite_steps = 2;
  ec.bucket_mb = 1e-6;  // one unit per bucket
  ec.optimizer_in_backward = true;
  Engine engine(model, ec, OptimConfig{}, SchedulerConfig{}, comm);
  bool poison = false;
  model->lin[1]->weight.register_hook([&](const torch::Tensor& grad) {
    return poison ? grad * std::numeric_limits<double>::quiet_NaN() : grad;
  });
  auto [x, y] = toy_batch(0, 8);
  auto step = [&] {
    engine.backward(torch::mse_loss(model->forward(x), y));
    engine.step();
  };
  step();
  EXPECT_FALSE(engine.read_stats().skipped);
  poison = true;
  const torch::Tensor poisoned_before = model->lin[1]->weight.detach().clone();
  const torch::Tensor head_before = model->head->weight.detach().clone();
  step();
  const StepStats stats = engine.read_stats();
  EXPECT_TRUE(stats.skipped);
  EXPECT_EQ(stats.skipped_total, 1);
  EXPECT_TRUE(std::isnan(stats.grad_norm));
  EXPECT_TRUE(model->lin[1]->weight.detach().equal(poisoned_before)) << "the non-finite bucket was updated";
  EXPECT_FALSE(model->head->weight.detach().equal(head_before)) << "the finite buckets were not updated";
  try {
    step();
    FAIL() << "expected a stop after 2 non-finite steps";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("consecutive steps had non-finite gradients"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("blocks.1.lin.weight"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace zest::testing
