// StepOutcome: what the host learns about each step without waiting for the device. After each step the
// step scalars are copied to pinned host memory behind an event; later calls look only at copies that
// have already arrived, print a warning for a skipped step, and end the run with an error when the device
// decided it must stop (fp16 overflow at the minimum scale, too many non-finite steps in a row). On the
// CPU the scalars are read at once.
#pragma once

#include "engine/engine_config.h"
#include "engine/step_scalars.h"

#include <torch/torch.h>

#include <deque>
#include <string>
#include <vector>

namespace zest {

class StepOutcome {
 public:
  // param_names: each parameter's name as the step scalars index them (the norm's pieces).
  StepOutcome(torch::Tensor scalars, std::vector<std::string> param_names, const EngineConfig& config, int rank);
  ~StepOutcome();

  // After step number `step` was decided on the device.
  void capture(int64_t step);
  // Checks every capture that has arrived (never waits).
  void poll();
  // Waits for the device, checks the latest state (decided by step number `step`) and returns it
  // (logging steps, the end of a run).
  StepScalars read_now(int64_t step);

 private:
  struct Capture;
  void check(const StepScalars& s, int64_t step);
  std::string param_name(double index) const;

  torch::Tensor scalars_;
  std::vector<std::string> param_names_;
  const EngineConfig config_;
  const int rank_;
  std::deque<Capture> pending_;  // CUDA: copies in flight, oldest first
  double last_skipped_total_ = 0.0;
};

}  // namespace zest
