// The learning-rate schedule the engine applies (scheduled_lr in engine/step_scalars.h, the only one):
// every step of the warm-up ramp, the cosine or linear decay and past its end, checked against the
// closed forms both as the reported rate and as the SGD update it moved the parameters by; a skipped
// (non-finite) step uses no rate and does not advance the schedule.
#include "comm/world.h"
#include "engine/engine.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numbers>
#include <ostream>
#include <string>

namespace zest::testing {
namespace {

constexpr int64_t kNumel = 8;

// One flat parameter w with the linear loss Σ c_i·w_i: its gradient is c at every step, so plain SGD moves
// w by exactly lr·c and the update shows the rate the optimizer used.
struct LinearNet : torch::nn::Module {
  LinearNet() { w = register_parameter("w", torch::ones({kNumel})); }
  torch::Tensor w;
};

torch::Tensor coefficients() { return torch::arange(1, kNumel + 1, torch::kFloat32) * 0.25; }

// The rate of optimizer update t (0-based), written out per phase: the ramp lr·(t+1)/W, then decay over
// D steps from lr to min_lr, then min_lr.
double expected_lr(ScheduleKind kind, double lr, int warmup, int decay, double min_lr, int64_t t) {
  if (t < warmup) return lr * static_cast<double>(t + 1) / warmup;
  if (kind == ScheduleKind::constant || decay == 0) return lr;
  if (t >= warmup + decay) return min_lr;
  const double progress = static_cast<double>(t - warmup) / decay;
  if (kind == ScheduleKind::cosine) return min_lr + (lr - min_lr) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
  return lr - (lr - min_lr) * progress;
}

struct ScheduleCase {
  ScheduleKind kind;
  int warmup;
  int decay;
};

void PrintTo(const ScheduleCase& c, std::ostream* os) {
  *os << to_string(c.kind) << ", warmup " << c.warmup << ", decay " << c.decay;
}

std::string case_name(const ::testing::TestParamInfo<ScheduleCase>& info) {
  return std::string(to_string(info.param.kind)) + "_warmup" + std::to_string(info.param.warmup) + "_decay" +
         std::to_string(info.param.decay);
}

class EngineSchedule : public ::testing::TestWithParam<ScheduleCase> {};

TEST_P(EngineSchedule, EveryStepMatchesTheClosedForm) {
  const ScheduleCase c = GetParam();
  constexpr double kLr = 0.02, kMinLr = 0.002;
  constexpr int64_t kSkippedCall = 6;  // this call's gradients are non-finite: no update, no schedule step
  const int64_t calls = c.warmup + c.decay + 8;  // warm-up, decay and well past its end
  auto model = std::make_shared<LinearNet>();
  EngineConfig ec;
  ec.device = DeviceKind::cpu;
  ec.stage = 2;
  ec.precision = Precision::fp32;
  OptimConfig oc;
  oc.name = OptimizerKind::sgd;
  oc.lr = kLr;
  oc.momentum = 0.0;
  oc.weight_decay = 0.0;
  SchedulerConfig sc;
  sc.name = c.kind;
  sc.warmup_steps = c.warmup;
  sc.decay_steps = c.decay;
  sc.min_lr = kMinLr;
  Engine engine(model, {{"all", {"w"}}}, ec, oc, sc, world_communicator());
  const torch::Tensor coeffs = coefficients();
  int64_t t = 0;  // updates applied so far
  for (int64_t call = 0; call < calls; ++call) {
    const std::string where = "call " + std::to_string(call) + ", update " + std::to_string(t);
    const torch::Tensor before = model->w.detach().clone();
    torch::Tensor loss = (model->w * coeffs).sum();
    if (call == kSkippedCall) loss = loss * std::numeric_limits<float>::infinity();
    engine.backward(loss);
    engine.step();
    const StepStats stats = engine.read_stats();
    if (call == kSkippedCall) {
      EXPECT_TRUE(stats.skipped) << where;
      EXPECT_EQ(stats.lr, 0.0) << where;
      EXPECT_TRUE(model->w.equal(before)) << where;
      continue;
    }
    const double lr = expected_lr(c.kind, kLr, c.warmup, c.decay, kMinLr, t);
    EXPECT_DOUBLE_EQ(stats.lr, lr) << where;
    const double moved = ((before - model->w.detach()) - lr * coeffs).abs().max().item<double>();
    EXPECT_LT(moved, 1e-6) << where << ": the update was not lr·gradient with lr = " << lr;
    ++t;
    EXPECT_EQ(stats.applied_steps, t) << where;
    EXPECT_DOUBLE_EQ(engine.current_lr(), expected_lr(c.kind, kLr, c.warmup, c.decay, kMinLr, t)) << where;
  }
}

INSTANTIATE_TEST_SUITE_P(Kinds, EngineSchedule,
                         ::testing::Values(ScheduleCase{ScheduleKind::cosine, 4, 10},
                                           ScheduleCase{ScheduleKind::linear, 3, 7},
                                           ScheduleCase{ScheduleKind::linear, 0, 5},
                                           ScheduleCase{ScheduleKind::constant, 5, 0},
                                           ScheduleCase{ScheduleKind::cosine, 0, 0}),
                         case_name);

// Spot values of the same closed forms, so the test's formula is itself pinned to numbers.
TEST(EngineScheduleFormula, KnownValues) {
  EXPECT_DOUBLE_EQ(expected_lr(ScheduleKind::cosine, 1.0, 4, 10, 0.1, 0), 0.25);      // ramp starts at lr/W
  EXPECT_DOUBLE_EQ(expected_lr(ScheduleKind::cosine, 1.0, 4, 10, 0.1, 3), 1.0);
  EXPECT_DOUBLE_EQ(expected_lr(ScheduleKind::cosine, 1.0, 4, 10, 0.1, 4), 1.0);       // decay starts at lr
  EXPECT_NEAR(expected_lr(ScheduleKind::cosine, 1.0, 4, 10, 0.1, 9), 0.55, 1e-12);     // halfway
  EXPECT_DOUBLE_EQ(expected_lr(ScheduleKind::linear, 2.0, 0, 4, 0.0, 2), 1.0);
  EXPECT_DOUBLE_EQ(expected_lr(ScheduleKind::linear, 2.0, 0, 4, 0.0, 400), 0.0);
}

}  // namespace
}  // namespace zest::testing
