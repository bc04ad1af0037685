// Learning-rate schedules: constant, or linear warm-up followed by cosine or linear decay to a floor.
#pragma once

#include "optim/optim_config.h"

#include <cstdint>

namespace zest {

// LR for the optimizer update number `step` (0-based): warm-up ramps (step+1)/warmup_steps · lr, then
// decay over decay_steps from lr to min_lr (cosine or linear), then min_lr.
double learning_rate(const SchedulerConfig& schedule, double base_lr, int64_t step);

}  // namespace zest
