// The inference schedulers `zest sample` offers, each reproducing one diffusers class for UNets that predict
// ε, v or x0 (prediction_type), on a zero-terminal-SNR schedule too: DDIM (DDIMScheduler, eta 0), Euler
// (EulerDiscreteScheduler, no churn) and DPM-Solver++ (DPMSolverMultistepScheduler, multistep order 1 or 2),
// plus the sampling loop with classifier-free guidance (and its rescale).
#pragma once

#include "models/unet/ddim.h"
#include "models/unet/scheduler_config.h"

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace zest::unet {

enum class SchedulerKind { ddim, euler, dpmpp };

// "ddim" | "euler" | "dpmpp"; anything else is an error listing the choices.
SchedulerKind parse_scheduler_kind(const std::string& name);
const char* to_string(SchedulerKind kind);
// The kind a pipeline's own scheduler class stands closest to: Euler for EulerDiscreteScheduler, DPM-Solver++
// for DPMSolverMultistepScheduler, DDIM for everything else (SD1.5's PNDMScheduler among them).
SchedulerKind default_scheduler_kind(const SchedulerConfig& config);

class Scheduler {
 public:
  virtual ~Scheduler() = default;
  // What the UNet is given at step i, descending (float32; Euler's "linspace" timesteps are fractional).
  const torch::Tensor& timesteps() const { return timesteps_; }
  int64_t steps() const { return timesteps_.size(0); }
  // x_T = noise · init_noise_sigma.
  virtual double init_noise_sigma() const { return 1.0; }
  // The UNet's input at step i for the current sample x.
  virtual torch::Tensor scale_model_input(const torch::Tensor& x, int64_t step) const { return x; }
  // The sample after step i, given the UNet's output (ε̂, v̂ or x̂0: the configuration's prediction_type) for
  // scale_model_input(x, i). Steps are taken in order.
  virtual torch::Tensor step(const torch::Tensor& output, int64_t step, const torch::Tensor& x) = 0;

 protected:
  torch::Tensor timesteps_;
};

// DDIMScheduler.step with eta 0; spacing default "leading"; clip_sample clamps x̂0.
class DdimScheduler : public Scheduler {
 public:
  DdimScheduler(const SchedulerConfig& config, int64_t steps);
  torch::Tensor step(const torch::Tensor& output, int64_t step, const torch::Tensor& x) override;

 private:
  torch::Tensor alphas_cumprod_;  // float64 copy of ᾱ
  std::vector<int64_t> t_;
  int64_t ratio_;
  double final_alpha_;
  bool clip_;
  double clip_range_;
  PredictionType prediction_;
};

// EulerDiscreteScheduler: σ_t = √((1−ᾱ)/ᾱ) interpolated at the timesteps, then 0 or σ_min; spacing
// default "linspace"; x ← x + (x − x̂0)/σ_i·(σ_{i+1} − σ_i) on the UNet input x/√(σ_i²+1).
class EulerScheduler : public Scheduler {
 public:
  EulerScheduler(const SchedulerConfig& config, int64_t steps);
  double init_noise_sigma() const override { return init_sigma_; }
  torch::Tensor scale_model_input(const torch::Tensor& x, int64_t step) const override;
  torch::Tensor step(const torch::Tensor& output, int64_t step, const torch::Tensor& x) override;
  const std::vector<double>& sigmas() const { return sigmas_; }

 private:
  PredictionType prediction_;
  std::vector<double> sigmas_;  // steps + 1
  double init_sigma_;
};

// DPMSolverMultistepScheduler with algorithm dpmsolver++: x̂0 = (x − σ_t ε̂)/α_t (or α_t x − σ_t v̂), first order on the first
// step (and the last ones as lower_order_final says), second order (midpoint or heun) from the last two x̂0.
class DpmSolverScheduler : public Scheduler {
 public:
  DpmSolverScheduler(const SchedulerConfig& config, int64_t steps);
  torch::Tensor step(const torch::Tensor& output, int64_t step, const torch::Tensor& x) override;
  const std::vector<double>& sigmas() const { return sigmas_; }

 private:
  SchedulerConfig config_;
  std::vector<double> sigmas_;  // steps + 1
  torch::Tensor previous_x0_;   // the model output of the step before (float32)
  int64_t lower_order_nums_ = 0;
};

std::unique_ptr<Scheduler> make_scheduler(SchedulerKind kind, const SchedulerConfig& config, int64_t steps);

// Runs the scheduler from x_T = noise · init_noise_sigma, without grad. `epsilon` gets the scaled input and
// the step's timesteps [B] (float32).
torch::Tensor run_scheduler(Scheduler& scheduler, const EpsilonFn& epsilon, const torch::Tensor& noise);

// The output of `model` with classifier-free guidance: with guidance_scale > 1 the unconditional and
// conditional inputs run as one batch [uncond ; cond] and out = out_u + scale·(out_c − out_u); with
// guidance_rescale > 0 that is then rescaled as diffusers' rescale_noise_cfg does (Lin et al. 2023, 3.4,
// for zero-terminal-SNR models): mixed by guidance_rescale with out·std(out_c)/std(out), per sample.
EpsilonFn guided_epsilon(UNet2DConditionModel& model, const UNetConditioning& cond,
                         const UNetConditioning& uncond, double guidance_scale, double guidance_rescale = 0.0);

// rescale_noise_cfg: φ·guided·std(cond)/std(guided) + (1 − φ)·guided, std over all but the batch dimension.
torch::Tensor rescale_guidance(const torch::Tensor& guided, const torch::Tensor& cond, double guidance_rescale);

}  // namespace zest::unet
