// `zest bench`: the configured model and engine on synthetic device-resident batches of the real shapes,
// launched like `zest train`. Warm-up steps, one step counted for FLOPs (recompute excluded) and the
// attention kernels that ran, then timed steps; the result is one JSON line from rank 0 with the slowest
// rank's step times, throughput, MFU, peak memory, model-state bytes against the formula, and the
// communication the computation waited for; with a profile directory, where the device time went.
#pragma once

#include "models/registry.h"
#include "train/run_config.h"

#include <nlohmann/json.hpp>

namespace zest {

struct BenchOptions {
  int steps = 10;
  int warmup = 3;
  SyntheticShapes shapes;      // 0: data.seq_len for the length when set, else the family's default
  double peak_tflops = 790.0;  // the MFU denominator (dense bf16 of one H200, measured)
  std::string profile_dir;     // non-empty: profile_steps more steps traced (profiling/step_trace.h), traces and tables here
  int profile_steps = 2;
  bool loss_curve = false;     // every step's loss (rank 0's last micro-batch) in the JSON line, as "loss_curve"
};

// Needs a live WorldGuard; every rank calls it. Returns the result (the same on every rank).
nlohmann::json run_bench(const RunConfig& config, const BenchOptions& options);

}  // namespace zest
