// The host's view of the loss-scaler fields of the step scalars (see loss_scaler.h).
#include "engine/loss_scaler.h"

#include "engine/step_scalars.h"

namespace zest {
namespace {

StepScalars read(const torch::Tensor& scalars) {
  const auto host = scalars.to(torch::kCPU);
  return *reinterpret_cast<const StepScalars*>(host.data_ptr<double>());
}

}  // namespace

double LossScaler::scale() const { return read(scalars_).loss_scale; }

LossScalerState LossScaler::state() const {
  const StepScalars s = read(scalars_);
  return {s.loss_scale, static_cast<int64_t>(s.clean_steps), static_cast<int>(s.hysteresis_left),
          static_cast<int64_t>(s.overflows)};
}

void LossScaler::load_state(const LossScalerState& state) {
  auto host = scalars_.to(torch::kCPU).clone();
  auto& s = *reinterpret_cast<StepScalars*>(host.data_ptr<double>());
  s.loss_scale = state.scale;
  s.clean_steps = static_cast<double>(state.clean_steps);
  s.hysteresis_left = static_cast<double>(state.hysteresis_left);
  s.overflows = static_cast<double>(state.overflows);
  torch::NoGradGuard no_grad;
  scalars_.copy_(host);
}

}  // namespace zest
