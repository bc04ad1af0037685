// The inference schedulers' configuration as diffusers reads a pipeline folder's
// scheduler/scheduler_config.json into another scheduler class (`from_config`): the fields zest's DDIM,
// Euler and DPM-Solver++ use, each left unset when the file does not give it (then the class's default).
#pragma once

#include "models/unet/ddpm.h"
#include "models/unet/prediction.h"

#include "formats/json_field.h"

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

namespace zest::unet {

struct SchedulerConfig {
  std::string class_name;  // "_class_name" ("" when absent), e.g. "PNDMScheduler" (SD1.5), "EulerDiscreteScheduler" (SDXL)
  int64_t num_train_timesteps = 1000;
  double beta_start = 0.00085;
  double beta_end = 0.012;
  std::string beta_schedule = "scaled_linear";  // or "linear"
  std::optional<std::string> timestep_spacing;  // "leading" | "linspace" | "trailing"; unset: the class's default
  std::optional<int64_t> steps_offset;          // unset: 0 (every class's default)
  std::optional<bool> set_alpha_to_one;         // DDIM; unset: true (DDIMScheduler's default)
  std::optional<bool> clip_sample;              // DDIM; unset: true
  double clip_sample_range = 1.0;               // DDIM
  std::string final_sigmas_type = "zero";       // Euler, DPM-Solver++: "zero" | "sigma_min"
  int64_t solver_order = 2;                     // DPM-Solver++: 1 or 2
  std::string solver_type = "midpoint";         // DPM-Solver++: "midpoint" | "heun"
  bool lower_order_final = true;                // DPM-Solver++
  bool euler_at_final = false;                  // DPM-Solver++
  PredictionType prediction_type = PredictionType::epsilon;  // what the UNet outputs (every class)
  bool rescale_betas_zero_snr = false;          // β rescaled to zero terminal SNR (every class)

  // The SD1.5 pipeline's values, for a folder without scheduler/scheduler_config.json.
  static SchedulerConfig stable_diffusion();

  // What the configuration is read for: sampling refuses every option zest's samplers do not implement;
  // training (the noise schedule and prediction type, as DDPMScheduler.from_pretrained reads them in
  // diffusers' training scripts) refuses only those that change the schedule (trained betas).
  enum class Use { sampling, training };

  // Reads a scheduler_config.json object. Options that would change the arithmetic beyond what zest
  // implements (Karras sigmas, thresholding, trained betas, ...) are errors naming `path`
  // and the field; bookkeeping and other classes' fields are ignored, as from_config ignores them.
  // A null field is Python's None: the class's default. Errors name the file and the field
  // (formats/json_field.h).
  static SchedulerConfig from_json(const JsonField& config, Use use = Use::sampling);
  static SchedulerConfig from_json(const nlohmann::json& config, const std::string& path, Use use = Use::sampling) {
    return from_json(JsonField(config, path), use);
  }
  static SchedulerConfig from_file(const std::filesystem::path& path, Use use = Use::sampling);

  // β and ᾱ of the training schedule (float32, as diffusers builds them), rescaled to zero terminal SNR
  // when rescale_betas_zero_snr says so.
  NoiseSchedule noise_schedule() const;
};

}  // namespace zest::unet
