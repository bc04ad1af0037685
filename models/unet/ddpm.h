// Stable Diffusion's training objective (docs/models.md 2.5): the DDPM noise schedule (scaled-linear or linear
// betas, optionally rescaled to zero terminal SNR) and the epsilon-prediction loss MSE(UNet(x_t, t, c), ε) with
// x_t = √ᾱ_t·x₀ + √(1−ᾱ_t)·ε. The other targets and the loss options are models/unet/diffusion_objective.h.
#pragma once

#include "core/device_copies.h"
#include "models/unet/unet_model.h"

#include <torch/torch.h>

#include <cstdint>

namespace zest::unet {

struct NoiseSchedule {
  torch::Tensor betas;           // [T] float32
  torch::Tensor alphas_cumprod;  // [T] float32, ᾱ_t = Π_{k≤t} (1 − β_k)
  std::shared_ptr<DeviceCopies> alphas_cumprod_copies;  // alphas_cumprod, uploaded once per device/dtype

  int64_t num_train_timesteps() const { return betas.size(0); }

  // diffusers "scaled_linear": β = linspace(√β_start, √β_end, T)² in float32; ᾱ = cumprod(1 − β)
  // in float32. SD1.5/SDXL: T = 1000, β 0.00085 → 0.012 (ᾱ_0 = 0.99915, ᾱ_999 ≈ 0.0047).
  static NoiseSchedule scaled_linear(int64_t num_train_timesteps = 1000, double beta_start = 0.00085,
                                     double beta_end = 0.012);
  // Any β [T] (float32): ᾱ = cumprod(1 − β) in float32, as diffusers' schedulers build it.
  static NoiseSchedule from_betas(const torch::Tensor& betas);
  // SD1.5's and SDXL's (the defaults above), made once.
  static const NoiseSchedule& stable_diffusion();
  // ᾱ on `device` in `dtype`, from the copies when they exist.
  torch::Tensor alphas_cumprod_on(const torch::Device& device, torch::Dtype dtype) const;
};

// diffusers' rescale_zero_terminal_snr (Lin et al. 2023, "Common Diffusion Noise Schedules and Sample Steps
// are Flawed", Algorithm 1), in float32 as diffusers computes it: √ᾱ is shifted so that its last value is 0
// and scaled so that its first is unchanged, and the β that give it are returned (β_{T−1} = 1, ᾱ_{T−1} = 0).
torch::Tensor rescale_zero_terminal_snr(const torch::Tensor& betas);

// x_t = √ᾱ_t·x0 + √(1−ᾱ_t)·noise per sample (t [B] integer), in x0's dtype (as diffusers' add_noise).
torch::Tensor add_noise(const NoiseSchedule& schedule, const torch::Tensor& x0,
                        const torch::Tensor& noise, const torch::Tensor& t);

// The loss at given timesteps t [B] (int64) and noise (deterministic): mean((ε̂ − noise)²) in float32.
torch::Tensor epsilon_loss_at(UNet2DConditionModel& model, const NoiseSchedule& schedule,
                              const torch::Tensor& x0, const UNetConditioning& cond,
                              const torch::Tensor& t, const torch::Tensor& noise);

// Draws t ~ U{0, …, T−1} per sample and ε ~ N(0, I) from `generator` (on its device, then moved to
// x0's), and returns epsilon_loss_at. x0 [B, C, H, W]: VAE latents × the scaling factor.
torch::Tensor epsilon_loss(UNet2DConditionModel& model, const torch::Tensor& x0,
                           const UNetConditioning& cond, torch::Generator& generator,
                           const NoiseSchedule& schedule = NoiseSchedule::stable_diffusion());

}  // namespace zest::unet
