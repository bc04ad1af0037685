// The `zest train` run: assembles model, data, engine, schedule, logging and checkpointing from a
// RunConfig (in that order), then runs the step loop until max_steps or a stop signal.
#pragma once

#include "train/run_config.h"

#include <cstdint>

namespace zest {

struct TrainOptions {
  // Continue from <checkpoint.dir>/latest when it exists. false: a fresh start, refused when
  // checkpoint.dir already holds checkpoints (train/run_folder.h).
  bool resume = true;
};

struct TrainOutcome {
  int64_t final_step = 0;
  bool preempted = false;  // stopped by SIGTERM/SIGINT (or the launcher's death) after saving
  double last_loss = 0.0;  // the last logged loss (a mean over the steps since the log before it)
};

// Needs a live WorldGuard (comm/world.h). Every rank calls it. Installs the stop handlers, ignores
// SIGPIPE/SIGXFSZ (train/stop_signal.h). Errors are zest::Error, one line each, LibTorch's included.
TrainOutcome run_training(const RunConfig& config, const TrainOptions& options);

}  // namespace zest
