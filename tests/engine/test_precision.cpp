// Mixed precision: the fp16 loss scaler (overflow on one rank skips the step everywhere, halves the
// scale, leaves parameters untouched; the scale grows after the window), bf16 training with fp32
// masters, and the non-finite stop for bf16/fp32.
#include "engine/engine.h"
#include "engine/loss_scaler.h"
#include "comm/world.h"
#include "toy_models.h"

#include <gtest/gtest.h>

#include <limits>

namespace zest::testing {
namespace {

std::vector<torch::Tensor> snapshot(torch::nn::Module& m) {
  std::vector<torch::Tensor> out;
  for (auto& p : m.parameters()) out.push_back(p.detach().clone());
  return out;
}

bool same(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  for (size_t i = 0; i < a.size(); ++i)
    if (!a[i].equal(b[i])) return false;
  return true;
}

TEST(DistFp16, OverflowOnOneRankSkipsEverywhereAndScaleRecovers) {
  auto comm = world_communicator();
  auto model = std::make_shared<ElementwiseNet>(3);
  EngineConfig ec;
  ec.stage = 2;
  ec.precision = Precision::fp16;
  ec.reduce_dtype = Precision::fp32;
  ec.loss_scale.initial = 1024;
  ec.loss_scale.window = 3;
  OptimConfig oc;
  oc.lr = 1e-2;
  Engine engine(model, ec, oc, SchedulerConfig{}, comm);
  EXPECT_EQ(model->w1.scalar_type(), torch::kHalf);
  EXPECT_EQ(engine.master_shard().scalar_type(), torch::kFloat32);

  auto x = torch::randn({4, 6}, at::detail::createCPUGenerator(comm->rank()));
  auto loss_for = [&](bool poison) {
    auto out = model->forward(x).to(torch::kFloat32);
    auto loss = out.pow(2).mean();
    // 1e30 overflows fp16 gradients on this rank only.
    return poison ? loss * 1e30 : loss;
  };
  // One clean step, then an overflow injected on the last rank only.
  engine.backward(loss_for(false));
  EXPECT_FALSE(engine.step().skipped);
  const auto before = snapshot(*model);
  const double scale_before = engine.loss_scaler().scale();
  engine.backward(loss_for(comm->rank() == comm->size() - 1));
  const auto stats = engine.step();
  EXPECT_TRUE(stats.skipped);                       // on every rank
  EXPECT_EQ(stats.skipped_total, 1);
  EXPECT_DOUBLE_EQ(engine.loss_scaler().scale(), scale_before / 2);
  EXPECT_TRUE(same(before, snapshot(*model)));      // parameters unchanged
  EXPECT_EQ(engine.step_count(), 1);                // Adam's step count did not advance
  // Three clean steps (the window) double the scale again.
  for (int i = 0; i < 3; ++i) {
    engine.backward(loss_for(false));
    EXPECT_FALSE(engine.step().skipped);
  }
  EXPECT_DOUBLE_EQ(engine.loss_scaler().scale(), scale_before);
  EXPECT_FALSE(same(before, snapshot(*model)));
}

TEST(LossScaler, HysteresisFloorAndGrowth) {
  LossScaleConfig c;
  c.initial = 8;
  c.window = 2;
  c.hysteresis = 2;
  c.min = 2;
  LossScaler s(c, /*enabled=*/true);
  EXPECT_FALSE(s.update(true));  // first overflow tolerated by hysteresis
  EXPECT_EQ(s.scale(), 8);
  EXPECT_FALSE(s.update(true));  // second halves
  EXPECT_EQ(s.scale(), 4);
  s.update(true);
  s.update(true);
  EXPECT_EQ(s.scale(), 2);       // floor reached
  s.update(true);
  EXPECT_TRUE(s.update(true));   // overflow at the floor is reported
  EXPECT_EQ(s.scale(), 2);
  s.update(false);
  s.update(false);
  EXPECT_EQ(s.scale(), 4);       // window of clean steps doubles
  LossScaler off(c, /*enabled=*/false);
  EXPECT_EQ(off.scale(), 1);
  EXPECT_FALSE(off.update(true));
  EXPECT_EQ(off.scale(), 1);
}

TEST(DistFp16, AtMinErrorStopsTheRun) {
  auto comm = world_communicator();
  auto model = std::make_shared<ElementwiseNet>(3);
  EngineConfig ec;
  ec.stage = 1;
  ec.precision = Precision::fp16;
  ec.loss_scale.initial = 4;
  ec.loss_scale.min = 2;
  ec.loss_scale.at_min = AtMinScale::error;
  Engine engine(model, ec, OptimConfig{}, SchedulerConfig{}, comm);
  auto x = torch::randn({4, 6});
  auto poisoned = [&] { return model->forward(x).to(torch::kFloat32).pow(2).mean() * 1e30; };
  engine.backward(poisoned());
  EXPECT_TRUE(engine.step().skipped);  // 4 → 2
  engine.backward(poisoned());
  try {
    engine.step();
    FAIL() << "expected the run to stop at the minimum loss scale";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("loss scale is at its minimum"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("w1"), std::string::npos) << e.what();
  }
}

TEST(DistBf16, LossFallsAndMasterStaysFp32) {
  auto comm = world_communicator();
  auto model = std::make_shared<ToyNet>(11);
  EngineConfig ec;
  ec.stage = 2;
  ec.precision = Precision::bf16;
  OptimConfig oc;
  oc.lr = 1e-2;
  Engine engine(model, ec, oc, SchedulerConfig{}, comm);
  EXPECT_EQ(model->embed->weight.scalar_type(), torch::kBFloat16);
  EXPECT_EQ(engine.master_shard().scalar_type(), torch::kFloat32);
  auto [x, y] = toy_batch(0, 64);
  double first = 0, last = 0;
  for (int step = 0; step < 60; ++step) {
    auto loss = torch::mse_loss(model->forward(x).to(torch::kFloat32), y);
    if (step == 0) first = loss.item<double>();
    last = loss.item<double>();
    engine.backward(loss);
    EXPECT_FALSE(engine.step().skipped);
  }
  EXPECT_LT(last, 0.5 * first) << "first " << first << " last " << last;
}

TEST(DistNonFinite, Bf16SkipsThenStopsNamingTheTensor) {
  auto comm = world_communicator();
  auto model = std::make_shared<ToyNet>(5);
  EngineConfig ec;
  ec.stage = 2;
  ec.precision = Precision::fp32;
  ec.max_nonfinite_steps = 2;
  Engine engine(model, ec, OptimConfig{}, SchedulerConfig{}, comm);
  auto [x, y] = toy_batch(0, 8);
  auto nan_loss = [&] {
    return torch::mse_loss(model->forward(x), y) * std::numeric_limits<double>::quiet_NaN();
  };
  engine.backward(nan_loss());
  EXPECT_TRUE(engine.step().skipped);
  engine.backward(nan_loss());
  try {
    engine.step();
    FAIL() << "expected a stop after 2 non-finite steps";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("consecutive steps had non-finite gradients"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("embed.weight"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace zest::testing
