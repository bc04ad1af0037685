// Learning-rate schedules: warm-up ramp, cosine and linear decay to the floor, constant.
#include "optim/lr_schedule.h"

#include <gtest/gtest.h>

#include <cmath>

namespace zest {
namespace {

TEST(LrSchedule, WarmupThenCosineToFloor) {
  SchedulerConfig s;
  s.name = ScheduleKind::cosine;
  s.warmup_steps = 4;
  s.decay_steps = 10;
  s.min_lr = 0.1;
  EXPECT_DOUBLE_EQ(learning_rate(s, 1.0, 0), 0.25);
  EXPECT_DOUBLE_EQ(learning_rate(s, 1.0, 3), 1.0);
  EXPECT_DOUBLE_EQ(learning_rate(s, 1.0, 4), 1.0);                  // decay starts at full lr
  EXPECT_NEAR(learning_rate(s, 1.0, 9), 0.1 + 0.9 * 0.5, 1e-12);    // halfway: cos(π/2) = 0
  EXPECT_DOUBLE_EQ(learning_rate(s, 1.0, 14), 0.1);
  EXPECT_DOUBLE_EQ(learning_rate(s, 1.0, 1000), 0.1);               // stays at the floor
}

TEST(LrSchedule, LinearAndConstant) {
  SchedulerConfig s;
  s.name = ScheduleKind::linear;
  s.decay_steps = 4;
  s.min_lr = 0.0;
  EXPECT_DOUBLE_EQ(learning_rate(s, 2.0, 0), 2.0);
  EXPECT_DOUBLE_EQ(learning_rate(s, 2.0, 2), 1.0);
  EXPECT_DOUBLE_EQ(learning_rate(s, 2.0, 4), 0.0);
  SchedulerConfig c;
  c.warmup_steps = 2;
  EXPECT_DOUBLE_EQ(learning_rate(c, 1.0, 0), 0.5);
  EXPECT_DOUBLE_EQ(learning_rate(c, 1.0, 500), 1.0);
}

}  // namespace
}  // namespace zest
