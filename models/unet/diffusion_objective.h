// The UNet's training objective with the options diffusers' and kohya's training scripts offer (the run
// file's [loss], docs/config_reference.md): the prediction target (epsilon, v_prediction, sample), min-SNR-γ
// weighting, offset noise, the noise schedule (zero terminal SNR included) and the range of timesteps drawn.
// Each option changes the loss exactly as diffusers' train_text_to_image.py does for the same tensors.
#pragma once

#include "models/loss_config.h"
#include "models/unet/ddpm.h"
#include "models/unet/prediction.h"
#include "models/unet/scheduler_config.h"
#include "models/unet/unet_model.h"

#include <torch/torch.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

namespace zest::unet {

struct DiffusionObjective {
  NoiseSchedule schedule = NoiseSchedule::stable_diffusion();
  PredictionType prediction = PredictionType::epsilon;
  double snr_gamma = 0.0;     // > 0: min-SNR-γ weights (prediction.h); 0: plain MSE
  double noise_offset = 0.0;  // noise += noise_offset · N(0, I) of shape [B, C, 1, 1]
  int64_t min_timestep = 0;   // t ~ U{min_timestep, …, max_timestep − 1}
  int64_t max_timestep = 1000;
};

// The objective of a run's [loss] for a UNet whose pipeline's scheduler configuration is `pipeline` (SD's
// defaults without one): prediction "auto" and an unset rescale_betas_zero_snr take the pipeline's values,
// an unset max_timestep its num_train_timesteps. Errors name the [loss] key; HY-Motion's keys (min_time,
// max_time) are refused.
DiffusionObjective diffusion_objective_for(const LossConfig& loss, const SchedulerConfig& pipeline);

// "v_prediction, min-SNR γ 5, noise offset 0.05, zero terminal SNR, timesteps [0, 1000)": what a run trains.
std::string describe(const DiffusionObjective& objective);

// The scheduler configuration of the pipeline `pretrained` belongs to: PIPELINE/scheduler/scheduler_config.json
// for a pipeline folder or its unet/ subfolder; nullopt for anything else (a UNet folder alone, a file, "").
std::optional<std::filesystem::path> pipeline_scheduler_config(const std::string& pretrained);

// noise + offset·offset_noise, offset_noise [B, C, 1, 1] (diffusers' noise_offset; offset 0 returns noise).
torch::Tensor offset_noise(const torch::Tensor& noise, const torch::Tensor& offset_noise, double offset);

// The loss of a UNet output `prediction` for clean latents x0, the (offset) noise and timesteps t [B]: MSE
// against the objective's target in float32, mean over all elements, or with snr_gamma the per-sample means
// weighted by min_snr_weights and then averaged.
torch::Tensor diffusion_loss_of(const DiffusionObjective& objective, const torch::Tensor& prediction,
                                const torch::Tensor& x0, const torch::Tensor& noise, const torch::Tensor& t);

// The model's loss at given t [B] (int64) and noise (the offset already added): x_t = add_noise(x0, noise, t).
torch::Tensor diffusion_loss_at(UNet2DConditionModel& model, const DiffusionObjective& objective,
                                const torch::Tensor& x0, const UNetConditioning& cond, const torch::Tensor& t,
                                const torch::Tensor& noise);

// Draws t ~ U{min_timestep, …, max_timestep − 1}, ε ~ N(0, I) and, with noise_offset, the offset noise
// [B, C, 1, 1] from `generator` (in that order, on its device), then diffusion_loss_at. With the default
// objective this draws and computes exactly what epsilon_loss does.
torch::Tensor diffusion_loss(UNet2DConditionModel& model, const DiffusionObjective& objective,
                             const torch::Tensor& x0, const UNetConditioning& cond, torch::Generator& generator);

}  // namespace zest::unet
