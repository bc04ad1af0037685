// What a diffusion UNet is trained to predict (diffusers' `prediction_type`): the noise ε, the velocity
// v = √ᾱ_t·ε − √(1−ᾱ_t)·x0 (SD 2.x 768-v models, many SDXL fine-tunes) or the clean sample x0; the
// regression target of each and the signal-to-noise ratio the min-SNR weighting is built on.
#pragma once

#include "models/unet/ddpm.h"

#include <torch/torch.h>

#include <optional>
#include <string>

namespace zest::unet {

enum class PredictionType { epsilon, v_prediction, sample };

// "epsilon" | "v_prediction" | "sample", diffusers' spellings.
const char* to_string(PredictionType type);
std::optional<PredictionType> prediction_type_named(const std::string& name);

// DDPMScheduler.get_velocity: v = √ᾱ_t·noise − √(1−ᾱ_t)·x0 per sample (t [B] integer), in x0's dtype.
torch::Tensor velocity(const NoiseSchedule& schedule, const torch::Tensor& x0, const torch::Tensor& noise,
                       const torch::Tensor& t);

// What the UNet's output is compared with: noise (epsilon), velocity (v_prediction) or x0 (sample).
torch::Tensor prediction_target(PredictionType type, const NoiseSchedule& schedule, const torch::Tensor& x0,
                                const torch::Tensor& noise, const torch::Tensor& t);

// training_utils.compute_snr: SNR(t) = (√ᾱ_t / √(1−ᾱ_t))² [B] float32, ∞ where ᾱ_t = 1 and 0 where ᾱ_t = 0.
torch::Tensor snr_at(const NoiseSchedule& schedule, const torch::Tensor& t);

// Min-SNR-γ loss weights [B] (Hang et al. 2023) as diffusers' training scripts compute them: min(SNR, γ)/SNR
// for epsilon, min(SNR, γ)/(SNR + 1) for v_prediction, and the paper's own x0 form min(SNR, γ) for sample.
torch::Tensor min_snr_weights(PredictionType type, const NoiseSchedule& schedule, const torch::Tensor& t,
                              double gamma);

}  // namespace zest::unet
