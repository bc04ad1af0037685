// The host's lagged view of each step's decision (see step_outcome.h).
#include "engine/step_outcome.h"

#include "core/check.h"

#include <c10/core/Event.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include <iostream>

namespace zest {

struct StepOutcome::Capture {
  int64_t step = 0;
  torch::Tensor host;  // pinned float64 [kStepScalarCount]
  c10::Event event;
};

namespace {

const StepScalars& as_scalars(const torch::Tensor& host) {
  return *reinterpret_cast<const StepScalars*>(host.data_ptr<double>());
}

c10::Stream current_stream(const torch::Device& device) {
  return c10::impl::VirtualGuardImpl(device.type()).getStream(device);
}

}  // namespace

StepOutcome::StepOutcome(torch::Tensor scalars, std::vector<std::string> param_names, const EngineConfig& config,
                         int rank)
    : scalars_(std::move(scalars)), param_names_(std::move(param_names)), config_(config), rank_(rank) {}

StepOutcome::~StepOutcome() = default;

std::string StepOutcome::param_name(double index) const {
  const auto i = static_cast<size_t>(index);
  if (index < 0 || i >= param_names_.size()) return "(none found: the norm itself overflowed)";
  return param_names_[i];
}

void StepOutcome::check(const StepScalars& s, int64_t step) {
  const bool newly_skipped = s.skipped_total > last_skipped_total_;
  last_skipped_total_ = s.skipped_total;
  const auto fatal = static_cast<StepFatal>(static_cast<int>(s.fatal));
  if (fatal == StepFatal::overflow_at_min_scale) {
    ZEST_FAIL("fp16 loss scale is at its minimum (", config_.loss_scale.min, ") and gradients still overflow at step ",
              step, " (first non-finite gradient: ", param_name(s.first_nonfinite_param),
              "); set engine.loss_scale.at_min = \"warn\" to keep skipping");
  }
  if (fatal == StepFatal::too_many_nonfinite) {
    ZEST_FAIL(static_cast<int64_t>(s.consecutive_nonfinite), " consecutive steps had non-finite gradients (first "
              "non-finite gradient: ", param_name(s.first_nonfinite_param), ") — stopping (engine.max_nonfinite_steps = ",
              config_.max_nonfinite_steps, ")");
  }
  if (newly_skipped && rank_ == 0) {
    std::cerr << "zest: warning: step " << step << " skipped: non-finite gradient in "
              << param_name(s.first_nonfinite_param)
              << (config_.precision == Precision::fp16 ? " (fp16 overflow; the loss scale is lowered)" : "") << "\n";
  }
}

void StepOutcome::capture(int64_t step) {
  if (scalars_.is_cpu()) {
    check(as_scalars(scalars_), step);
    return;
  }
  poll();
  Capture c{step, torch::empty({kStepScalarCount}, torch::TensorOptions().dtype(torch::kFloat64).pinned_memory(true)),
            c10::Event(scalars_.device().type())};
  c.host.copy_(scalars_, /*non_blocking=*/true);
  c.event.record(current_stream(scalars_.device()));
  pending_.push_back(std::move(c));
}

void StepOutcome::poll() {
  while (!pending_.empty() && pending_.front().event.query()) {
    const Capture c = std::move(pending_.front());
    pending_.pop_front();
    check(as_scalars(c.host), c.step);
  }
}

StepScalars StepOutcome::read_now(int64_t step) {
  const auto host = scalars_.to(torch::kCPU);  // waits for the device on GPU
  pending_.clear();
  const StepScalars s = as_scalars(host);
  check(s, step);
  return s;
}

}  // namespace zest
