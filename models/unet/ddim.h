// DDIM sampling for inference with an epsilon-prediction UNet (diffusers' DDIMScheduler with
// "leading" timestep spacing, no clipping, no thresholding), with optional classifier-free guidance.
#pragma once

#include "models/unet/ddpm.h"
#include "models/unet/unet_model.h"

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <optional>

namespace zest::unet {

struct DdimOptions {
  int64_t steps = 50;
  double eta = 0.0;               // 0: deterministic DDIM; 1: DDPM-like variance
  int64_t steps_offset = 1;       // SD1.5/SDXL scheduler configs
  bool set_alpha_to_one = false;  // SD configs: the last step lands on ᾱ_0, not 1
  double guidance_scale = 1.0;    // > 1: ε = ε_uncond + scale·(ε_cond − ε_uncond)
};

// The inference timesteps, descending: (0, r, 2r, …)·reversed + steps_offset with r = T / steps.
torch::Tensor ddim_timesteps(const NoiseSchedule& schedule, const DdimOptions& options);

// ε̂ for x_t at timesteps t [B] (int64).
using EpsilonFn = std::function<torch::Tensor(const torch::Tensor& x_t, const torch::Tensor& t)>;

// Runs DDIM from x_T = `noise` without grad; `generator` is needed only when eta > 0.
torch::Tensor sample_ddim(const EpsilonFn& epsilon, const torch::Tensor& noise,
                          const NoiseSchedule& schedule, const DdimOptions& options,
                          torch::Generator* generator = nullptr);

// The same with the UNet as ε̂. With guidance_scale > 1, `uncond` (e.g. the empty prompt's
// embedding, same shapes as `cond`) is run in the same batch.
torch::Tensor sample_ddim(UNet2DConditionModel& model, const torch::Tensor& noise,
                          const UNetConditioning& cond, const DdimOptions& options = {},
                          const std::optional<UNetConditioning>& uncond = std::nullopt,
                          torch::Generator* generator = nullptr,
                          const NoiseSchedule& schedule = NoiseSchedule::scaled_linear());

}  // namespace zest::unet
