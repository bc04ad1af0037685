// StepScalars: every per-step number of the optimizer step (gradient norm, overflow and skip, clip
// coefficient, loss scale, learning rate, Adam's bias corrections, the counters that resume) as one small
// block of doubles that lives on the engine's device, and the decisions that advance it (decide_step for a
// whole step; three parts of it for updates during backward, apply_step_decision choosing). The same
// source compiles for the host (CPU runs call it directly) and for CUDA (one thread of a kernel runs it),
// so a GPU step decides to skip, clip and rescale without the host ever reading a value.
#pragma once

#include "core/host_device.h"

#include <cmath>
#include <cstdint>

namespace zest {

#if !defined(__CUDACC__)
using std::cos;
using std::isfinite;
using std::pow;
using std::sqrt;
#endif

// Constant for a run: what decide_step needs from the config.
struct StepRules {
  double clip_norm = 0.0;         // 0 = no clipping
  double world_size = 1.0;        // gradients arrive summed over ranks
  // fp16 dynamic loss scaling (disabled: the scale stays 1)
  double loss_scaling = 0.0;      // 1 = on
  double scale_min = 1.0;
  double scale_window = 1000.0;
  double scale_hysteresis = 1.0;
  double stop_at_min_scale = 1.0;  // 1: an overflow at the floor ends the run; 0: keep skipping
  double max_nonfinite_steps = 5.0;
  // learning-rate schedule (scheduled_lr below, the run's [scheduler]); kind: 0 constant, 1 cosine, 2 linear
  double schedule_kind = 0.0;
  double base_lr = 0.0;
  double warmup_steps = 0.0;
  double decay_steps = 0.0;
  double min_lr = 0.0;
  // Adam
  double beta1 = 0.9;
  double beta2 = 0.999;
};

// Why a run must stop (StepScalars::fatal).
enum class StepFatal { none = 0, overflow_at_min_scale = 1, too_many_nonfinite = 2 };

// Doubles only, so it maps onto one float64 tensor (counters stay exact up to 2^53).
struct StepScalars {
  // ---- carried across steps (saved in checkpoints) ----
  double loss_scale = 1.0;          // the scale the next backward multiplies the loss by
  double clean_steps = 0.0;         // consecutive clean steps since the scale last changed
  double hysteresis_left = 1.0;     // overflows still tolerated before the next halving
  double overflows = 0.0;           // steps skipped because of fp16 overflow
  double applied_steps = 0.0;       // optimizer updates applied (Adam's t, the schedule's position)
  double skipped_total = 0.0;       // steps skipped for non-finite gradients
  double consecutive_nonfinite = 0.0;
  // ---- this step's decision ----
  double used_loss_scale = 1.0;     // the scale this step's backward passes used
  double grad_norm = 0.0;           // of the unscaled, averaged gradient, before clipping (inf/nan if skipped)
  double skip = 0.0;                // 1: no update anywhere
  double applied = 0.0;             // 1 - skip
  double clip_coef = 1.0;
  double grad_multiplier = 1.0;     // applied to the summed, scaled gradient: unscale · 1/world · clip
  double lr = 0.0;                  // learning rate of this update (0 when skipped)
  double bias_correction1 = 1.0;    // 1 - beta1^t
  double bias_correction2_sqrt = 1.0;  // sqrt(1 - beta2^t)
  double first_nonfinite_param = -1.0;  // index of the first parameter with a non-finite gradient, or -1
  double fatal = 0.0;               // StepFatal
};
inline constexpr int kStepScalarCount = static_cast<int>(sizeof(StepScalars) / sizeof(double));
static_assert(sizeof(StepScalars) == kStepScalarCount * sizeof(double), "StepScalars must be doubles only");

// Offsets of the fields read as device tensors elsewhere (loss scaling of backward, EMA gating).
inline constexpr int kLossScaleIndex = 0;
inline constexpr int kAppliedStepsIndex = 4;
inline constexpr int kAppliedIndex = 10;

// The learning rate of optimizer update `step` (0-based; skipped steps do not count): the warm-up ramps
// base_lr·(step+1)/warmup_steps, then decay over decay_steps from base_lr to min_lr (cosine or linear),
// then min_lr. The one schedule of zest: the engine applies it and reports it (Engine::current_lr).
ZEST_HOST_DEVICE inline double scheduled_lr(const StepRules& r, double step) {
  if (step < r.warmup_steps) return r.base_lr * (step + 1.0) / r.warmup_steps;
  if (r.schedule_kind == 0.0 || r.decay_steps <= 0.0) return r.base_lr;
  double progress = (step - r.warmup_steps) / r.decay_steps;
  progress = progress < 0.0 ? 0.0 : (progress > 1.0 ? 1.0 : progress);
  const double span = r.base_lr - r.min_lr;
  if (r.schedule_kind == 1.0) return r.min_lr + span * 0.5 * (1.0 + cos(3.14159265358979323846 * progress));
  return r.base_lr - span * progress;
}

// The fp16 scaler after a step: double after `window` clean steps, halve after `hysteresis` overflows,
// never below the floor. Returns true when the overflow happened at the floor.
ZEST_HOST_DEVICE inline bool advance_loss_scale(const StepRules& r, StepScalars& s, bool overflow) {
  if (r.loss_scaling == 0.0) return false;
  if (!overflow) {
    s.clean_steps += 1.0;
    if (s.clean_steps >= r.scale_window) {
      s.loss_scale *= 2.0;
      s.clean_steps = 0.0;
      s.hysteresis_left = r.scale_hysteresis < 1.0 ? 1.0 : r.scale_hysteresis;
    }
    return false;
  }
  s.overflows += 1.0;
  s.clean_steps = 0.0;
  const bool at_floor = s.loss_scale <= r.scale_min;
  s.hysteresis_left -= 1.0;
  if (s.hysteresis_left <= 0.0) {
    const double halved = s.loss_scale * 0.5;
    s.loss_scale = halved < r.scale_min ? r.scale_min : halved;
    s.hysteresis_left = r.scale_hysteresis < 1.0 ? 1.0 : r.scale_hysteresis;
  }
  return at_floor;
}

// The sum of the per-parameter sums of squares; notes the first non-finite one (the tensor a stop names).
ZEST_HOST_DEVICE inline double total_sum_of_squares(StepScalars& s, const double* param_sumsq, int64_t num_params) {
  double sumsq = 0.0;
  s.first_nonfinite_param = -1.0;
  for (int64_t i = 0; i < num_params; ++i) {
    const double v = param_sumsq[i];
    if (!isfinite(v) && s.first_nonfinite_param < 0.0) s.first_nonfinite_param = static_cast<double>(i);
    sumsq += v;
  }
  return sumsq;
}

// A step skipped for non-finite gradients: counted; the run ends on an overflow at the loss scaler's floor
// (fp16, when asked to) or, without loss scaling, after max_nonfinite_steps of them in a row.
ZEST_HOST_DEVICE inline void count_nonfinite_step(const StepRules& r, StepScalars& s, bool at_min_scale) {
  s.skipped_total += 1.0;
  s.consecutive_nonfinite += 1.0;
  if (r.loss_scaling != 0.0) {
    if (at_min_scale && r.stop_at_min_scale != 0.0) s.fatal = static_cast<double>(StepFatal::overflow_at_min_scale);
  } else if (s.consecutive_nonfinite >= r.max_nonfinite_steps) {
    s.fatal = static_cast<double>(StepFatal::too_many_nonfinite);
  }
}

// One step's decision from the per-parameter sums of squares of the (summed over ranks, loss-scaled)
// gradient: norm, skip on any non-finite value, clip coefficient, multiplier, learning rate, bias
// corrections; then the scaler and counters advance.
ZEST_HOST_DEVICE inline void decide_step(const StepRules& r, StepScalars& s, const double* param_sumsq,
                                         int64_t num_params) {
  const double sumsq = total_sum_of_squares(s, param_sumsq, num_params);
  s.used_loss_scale = s.loss_scale;
  const double unscale = 1.0 / (s.loss_scale * r.world_size);
  s.grad_norm = sqrt(sumsq) * unscale;
  const bool overflow = !isfinite(sumsq);
  s.skip = overflow ? 1.0 : 0.0;
  s.applied = overflow ? 0.0 : 1.0;
  if (overflow) {
    s.clip_coef = 1.0;
    s.grad_multiplier = 0.0;
    s.lr = 0.0;
    count_nonfinite_step(r, s, /*at_min_scale=*/advance_loss_scale(r, s, true));
    return;
  }
  s.clip_coef = 1.0;
  if (r.clip_norm > 0.0) {
    const double c = r.clip_norm / (s.grad_norm + 1e-6);
    s.clip_coef = c < 1.0 ? c : 1.0;
  }
  s.grad_multiplier = unscale * s.clip_coef;
  s.lr = scheduled_lr(r, s.applied_steps);
  s.applied_steps += 1.0;
  s.bias_correction1 = 1.0 - pow(r.beta1, s.applied_steps);
  s.bias_correction2_sqrt = sqrt(1.0 - pow(r.beta2, s.applied_steps));
  s.consecutive_nonfinite = 0.0;
  advance_loss_scale(r, s, false);
}

// ---- [engine] optimizer_in_backward: each bucket is updated as soon as its gradients are reduced ----
// No clipping and no loss scaling there (the config refuses both), so the step's numbers are known before
// its backward begins; only the non-finite check is per bucket. The decisions come in three parts:

// Before the backward that ends the step: learning rate, Adam's t and bias corrections, the multiplier
// (1/world: gradients arrive summed), and no skip unless a bucket says so.
ZEST_HOST_DEVICE inline void begin_update_in_backward(const StepRules& r, StepScalars& s) {
  s.used_loss_scale = s.loss_scale;
  s.clip_coef = 1.0;
  s.grad_multiplier = 1.0 / (s.loss_scale * r.world_size);
  s.lr = scheduled_lr(r, s.applied_steps);
  s.applied_steps += 1.0;
  s.bias_correction1 = 1.0 - pow(r.beta1, s.applied_steps);
  s.bias_correction2_sqrt = sqrt(1.0 - pow(r.beta2, s.applied_steps));
  s.skip = 0.0;
  s.applied = 1.0;
}

// Before one bucket's update: skip it when its part of this rank's gradient holds a non-finite value
// (bucket_sumsq: its parameters' sums of squares), so a bucket never takes an inf/nan into its master.
ZEST_HOST_DEVICE inline void decide_bucket_update(StepScalars& s, const double* bucket_sumsq, int64_t num_params) {
  double sumsq = 0.0;
  for (int64_t i = 0; i < num_params; ++i) sumsq += bucket_sumsq[i];
  s.skip = isfinite(sumsq) ? 0.0 : 1.0;
}

// After every bucket's update: the step's norm (sums over ranks), and a step with a non-finite gradient
// counts as skipped (its other buckets were updated already): the counters, the run-ending rule and the
// EMA's gate (applied = 0) as for a skipped whole step.
ZEST_HOST_DEVICE inline void finish_update_in_backward(const StepRules& r, StepScalars& s, const double* param_sumsq,
                                                       int64_t num_params) {
  const double sumsq = total_sum_of_squares(s, param_sumsq, num_params);
  s.grad_norm = sqrt(sumsq) / (s.used_loss_scale * r.world_size);
  const bool overflow = !isfinite(sumsq);
  s.skip = overflow ? 1.0 : 0.0;
  s.applied = overflow ? 0.0 : 1.0;
  if (overflow) {
    count_nonfinite_step(r, s, /*at_min_scale=*/false);  // no loss scaling here (the config refuses fp16)
  } else {
    s.consecutive_nonfinite = 0.0;
  }
}

// Which decision runs (engine/step_decision.h runs it where the scalars live).
enum class StepDecision : int {
  whole_step = 0,         // decide_step: after every gradient is reduced
  in_backward_begin = 1,  // begin_update_in_backward (param_sumsq unused)
  in_backward_bucket = 2,  // decide_bucket_update: param_sumsq is the bucket's parameters' part
  in_backward_finish = 3,  // finish_update_in_backward
};

// The decision itself, on whichever side runs it.
ZEST_HOST_DEVICE inline void apply_step_decision(StepDecision decision, const StepRules& rules, StepScalars& s,
                                                 const double* param_sumsq, int64_t num_params) {
  switch (decision) {
    case StepDecision::whole_step: decide_step(rules, s, param_sumsq, num_params); return;
    case StepDecision::in_backward_begin: begin_update_in_backward(rules, s); return;
    case StepDecision::in_backward_bucket: decide_bucket_update(s, param_sumsq, num_params); return;
    case StepDecision::in_backward_finish: finish_update_in_backward(rules, s, param_sumsq, num_params); return;
  }
}

}  // namespace zest
