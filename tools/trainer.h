// The `zest train` run: assembles model, data, engine, schedule, logging and checkpointing from a
// RunConfig (in that order), then runs the step loop until max_steps or a stop signal.
#pragma once

#include "tools/run_config.h"

#include <cstdint>

namespace zest {

struct TrainOptions {
  bool resume = true;  // continue from <checkpoint.dir>/latest when it exists
};

struct TrainOutcome {
  int64_t final_step = 0;
  bool preempted = false;  // stopped by SIGTERM/SIGINT after saving
  double last_loss = 0.0;
};

// Needs a live WorldGuard (comm/world.h). Every rank calls it.
TrainOutcome run_training(const RunConfig& config, const TrainOptions& options);

}  // namespace zest
