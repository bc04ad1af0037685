// The UNet's configurable training objective (see diffusion_objective.h).
#include "models/unet/diffusion_objective.h"

#include "core/check.h"

namespace zest::unet {
namespace {

namespace fs = std::filesystem;

// A zero-SNR timestep inside the drawn range (ᾱ_t = 0: the last one after rescale_betas_zero_snr).
bool draws_zero_snr(const DiffusionObjective& objective) {
  const auto drawn = objective.schedule.alphas_cumprod.slice(0, objective.min_timestep, objective.max_timestep);
  return (drawn == 0).any().item<bool>();
}

void check_timestep_range(const LossConfig& loss, const DiffusionObjective& objective) {
  const int64_t train_steps = objective.schedule.num_train_timesteps();
  ZEST_CHECK(objective.min_timestep < train_steps, loss.key("min_timestep"), " is ", objective.min_timestep,
             "; the noise schedule has ", train_steps, " timesteps (0 to ", train_steps - 1, ")");
  ZEST_CHECK(objective.max_timestep <= train_steps, loss.key("max_timestep"), " is ", objective.max_timestep,
             "; the noise schedule has ", train_steps, " timesteps: at most ", train_steps,
             " (timesteps are drawn from [min_timestep, max_timestep))");
  ZEST_CHECK(objective.min_timestep < objective.max_timestep, loss.key("min_timestep"), " is ",
             objective.min_timestep, "; it must be below max_timestep (", objective.max_timestep, ")");
}

}  // namespace

DiffusionObjective diffusion_objective_for(const LossConfig& loss, const SchedulerConfig& pipeline) {
  for (const auto& [key, is_set] : {std::pair{"min_time", loss.min_time != 0.0}, std::pair{"max_time", loss.max_time != 1.0}}) {
    ZEST_CHECK(!is_set, loss.key(key), " is HY-Motion's flow-time range; a diffusion UNet's is min_timestep / "
               "max_timestep (integer timesteps)");
  }
  SchedulerConfig scheduler = pipeline;
  if (loss.rescale_betas_zero_snr) scheduler.rescale_betas_zero_snr = *loss.rescale_betas_zero_snr;
  DiffusionObjective objective;
  objective.schedule = scheduler.noise_schedule();
  objective.prediction = loss.prediction == "auto" ? pipeline.prediction_type : *prediction_type_named(loss.prediction);
  objective.snr_gamma = loss.snr_gamma;
  objective.noise_offset = loss.noise_offset;
  objective.min_timestep = loss.min_timestep;
  objective.max_timestep = loss.max_timestep.value_or(objective.schedule.num_train_timesteps());
  check_timestep_range(loss, objective);
  // 0/0 at a zero-SNR timestep: diffusers' scripts would train on NaN there.
  ZEST_CHECK(!(objective.snr_gamma > 0 && objective.prediction == PredictionType::epsilon && draws_zero_snr(objective)),
             loss.key("snr_gamma"), " with epsilon prediction divides by the SNR, which is 0 at the last timestep of a "
             "zero-terminal-SNR schedule; use prediction = \"v_prediction\" (what zero terminal SNR is meant for) or "
             "max_timestep = ", objective.schedule.num_train_timesteps() - 1);
  return objective;
}

std::string describe(const DiffusionObjective& objective) {
  std::string text = to_string(objective.prediction);
  if (objective.snr_gamma > 0) text += str(", min-SNR γ ", objective.snr_gamma);
  if (objective.noise_offset > 0) text += str(", noise offset ", objective.noise_offset);
  if (objective.schedule.alphas_cumprod[-1].item<double>() == 0.0) text += ", zero terminal SNR";
  return text + str(", timesteps [", objective.min_timestep, ", ", objective.max_timestep, ")");
}

std::optional<fs::path> pipeline_scheduler_config(const std::string& pretrained) {
  if (pretrained.empty() || !fs::is_directory(pretrained)) return std::nullopt;
  const fs::path folder = fs::path(pretrained).lexically_normal();
  const fs::path pipeline = folder.has_filename() ? folder : folder.parent_path();
  for (const fs::path& candidate : {pipeline / "scheduler" / "scheduler_config.json",
                                    pipeline.parent_path() / "scheduler" / "scheduler_config.json"}) {
    const bool is_unet_subfolder = candidate.parent_path().parent_path() != pipeline;
    if (is_unet_subfolder && pipeline.filename() != "unet") continue;
    if (fs::is_regular_file(candidate)) return candidate;
  }
  return std::nullopt;
}

torch::Tensor offset_noise(const torch::Tensor& noise, const torch::Tensor& offset_noise, double offset) {
  if (offset == 0.0) return noise;
  ZEST_CHECK(offset_noise.dim() == noise.dim() && offset_noise.size(0) == noise.size(0) &&
                 offset_noise.size(1) == noise.size(1),
             "noise offset: expected [", noise.size(0), ", ", noise.size(1), ", 1, 1], got ", offset_noise.sizes());
  return noise + offset * offset_noise.to(noise.scalar_type());
}

torch::Tensor diffusion_loss_of(const DiffusionObjective& objective, const torch::Tensor& prediction,
                                const torch::Tensor& x0, const torch::Tensor& noise, const torch::Tensor& t) {
  const auto target = prediction_target(objective.prediction, objective.schedule, x0, noise, t);
  const auto pred = prediction.to(torch::kFloat32);
  if (objective.snr_gamma <= 0.0) return torch::mse_loss(pred, target.to(torch::kFloat32));
  const auto weights = min_snr_weights(objective.prediction, objective.schedule, t.to(pred.device()), objective.snr_gamma);
  std::vector<int64_t> per_sample_dims;
  for (int64_t d = 1; d < pred.dim(); ++d) per_sample_dims.push_back(d);
  const auto per_sample = torch::mse_loss(pred, target.to(torch::kFloat32), at::Reduction::None).mean(per_sample_dims);
  return (per_sample * weights).mean();
}

torch::Tensor diffusion_loss_at(UNet2DConditionModel& model, const DiffusionObjective& objective,
                                const torch::Tensor& x0, const UNetConditioning& cond, const torch::Tensor& t,
                                const torch::Tensor& noise) {
  ZEST_CHECK(noise.sizes() == x0.sizes(), "diffusion loss: noise ", noise.sizes(), " must match the latents ",
             x0.sizes());
  const auto device_t = t.to(x0.device());
  const auto x_t = add_noise(objective.schedule, x0, noise, device_t);
  const auto prediction = model.forward(x_t, device_t, cond);
  return diffusion_loss_of(objective, prediction, x0, noise, device_t);
}

torch::Tensor diffusion_loss(UNet2DConditionModel& model, const DiffusionObjective& objective,
                             const torch::Tensor& x0, const UNetConditioning& cond, torch::Generator& generator) {
  ZEST_CHECK(x0.dim() == 4, "diffusion loss: latents must be [B, C, H, W], got ", x0.sizes());
  ZEST_CHECK(0 <= objective.min_timestep && objective.min_timestep < objective.max_timestep &&
                 objective.max_timestep <= objective.schedule.num_train_timesteps(),
             "diffusion loss: timestep range [", objective.min_timestep, ", ", objective.max_timestep,
             ") is not inside [0, ", objective.schedule.num_train_timesteps(), ")");
  const auto on_generator = torch::TensorOptions().device(generator.device());
  const auto t = torch::randint(objective.min_timestep, objective.max_timestep, {x0.size(0)}, generator,
                                on_generator.dtype(torch::kLong));
  auto noise = torch::randn(x0.sizes(), generator, on_generator.dtype(torch::kFloat32));
  if (objective.noise_offset != 0.0) {
    const auto offset = torch::randn({x0.size(0), x0.size(1), 1, 1}, generator, on_generator.dtype(torch::kFloat32));
    noise = offset_noise(noise, offset, objective.noise_offset);
  }
  return diffusion_loss_at(model, objective, x0, cond, t.to(x0.device()), noise.to(x0.device(), x0.scalar_type()));
}

}  // namespace zest::unet
