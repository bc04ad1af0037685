// Learning-rate schedule formulas (see lr_schedule.h).
#include "optim/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace zest {

double learning_rate(const SchedulerConfig& schedule, double base_lr, int64_t step) {
  if (step < schedule.warmup_steps) {
    return base_lr * static_cast<double>(step + 1) / static_cast<double>(schedule.warmup_steps);
  }
  if (schedule.name == ScheduleKind::constant || schedule.decay_steps <= 0) return base_lr;
  const double progress = std::clamp(
      static_cast<double>(step - schedule.warmup_steps) / schedule.decay_steps, 0.0, 1.0);
  const double span = base_lr - schedule.min_lr;
  if (schedule.name == ScheduleKind::cosine) {
    return schedule.min_lr + span * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
  }
  return base_lr - span * progress;
}

}  // namespace zest
