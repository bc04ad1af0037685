// The DDPM schedules (scaled-linear, any betas, zero-terminal-SNR rescaling) and the epsilon-prediction loss
// (diffusers' DDPMScheduler.add_noise + the text-to-image training example's MSE).
#include "models/unet/ddpm.h"

#include "core/check.h"

#include <cmath>

namespace zest::unet {

NoiseSchedule NoiseSchedule::scaled_linear(int64_t num_train_timesteps, double beta_start,
                                           double beta_end) {
  ZEST_CHECK(num_train_timesteps > 1, "NoiseSchedule: need at least 2 timesteps");
  const auto roots = torch::linspace(std::sqrt(beta_start), std::sqrt(beta_end), num_train_timesteps,
                                     torch::TensorOptions().dtype(torch::kFloat32));
  return from_betas(roots * roots);  // diffusers: ** 2, which PyTorch computes as x·x
}

NoiseSchedule NoiseSchedule::from_betas(const torch::Tensor& betas) {
  ZEST_CHECK(betas.dim() == 1 && betas.size(0) > 1, "NoiseSchedule: need at least 2 betas, got ", betas.sizes());
  NoiseSchedule s;
  s.betas = betas.to(torch::kFloat32).contiguous();
  s.alphas_cumprod = torch::cumprod(1.0 - s.betas, 0);
  s.alphas_cumprod_copies = std::make_shared<DeviceCopies>(s.alphas_cumprod);
  return s;
}

torch::Tensor rescale_zero_terminal_snr(const torch::Tensor& betas) {
  const auto alphas_cumprod = torch::cumprod(1.0 - betas.to(torch::kFloat32), 0);
  auto root = alphas_cumprod.sqrt();
  const auto first = root[0].clone();
  const auto last = root[-1].clone();
  // The same operations in the same order as the reference, so that the float32 values are its own.
  root = (root - last) * (first / (first - last));
  const auto alphas_bar = root.pow(2);
  const auto alphas = torch::cat({alphas_bar.slice(0, 0, 1), alphas_bar.slice(0, 1) / alphas_bar.slice(0, 0, -1)});
  return 1.0 - alphas;
}

const NoiseSchedule& NoiseSchedule::stable_diffusion() {
  // Never destroyed: its device copies must not be freed after the CUDA runtime has shut down at exit.
  static const NoiseSchedule* const schedule = new NoiseSchedule(scaled_linear());
  return *schedule;
}

torch::Tensor NoiseSchedule::alphas_cumprod_on(const torch::Device& device, torch::Dtype dtype) const {
  return alphas_cumprod_copies ? alphas_cumprod_copies->on(device, dtype) : alphas_cumprod.to(device, dtype);
}

torch::Tensor add_noise(const NoiseSchedule& schedule, const torch::Tensor& x0,
                        const torch::Tensor& noise, const torch::Tensor& t) {
  ZEST_CHECK(t.dim() == 1 && t.size(0) == x0.size(0), "add_noise: t must be [", x0.size(0),
             "], got ", t.sizes());
  const auto acp = schedule.alphas_cumprod_on(x0.device(), x0.scalar_type())
                       .index_select(0, t.to(x0.device(), torch::kLong));
  std::vector<int64_t> shape(static_cast<size_t>(x0.dim()), 1);
  shape[0] = x0.size(0);
  const auto sqrt_alpha = torch::sqrt(acp).view(shape);
  const auto sqrt_one_minus_alpha = torch::sqrt(1.0 - acp).view(shape);
  return sqrt_alpha * x0 + sqrt_one_minus_alpha * noise;
}

torch::Tensor epsilon_loss_at(UNet2DConditionModel& model, const NoiseSchedule& schedule,
                              const torch::Tensor& x0, const UNetConditioning& cond,
                              const torch::Tensor& t, const torch::Tensor& noise) {
  ZEST_CHECK(noise.sizes() == x0.sizes(), "epsilon_loss: noise ", noise.sizes(),
             " must match the latents ", x0.sizes());
  const auto x_t = add_noise(schedule, x0, noise, t);
  const auto prediction = model.forward(x_t, t.to(x0.device()), cond);
  return torch::mse_loss(prediction.to(torch::kFloat32), noise.to(torch::kFloat32));
}

torch::Tensor epsilon_loss(UNet2DConditionModel& model, const torch::Tensor& x0,
                           const UNetConditioning& cond, torch::Generator& generator,
                           const NoiseSchedule& schedule) {
  const auto on_generator = torch::TensorOptions().device(generator.device());
  const auto t = torch::randint(0, schedule.num_train_timesteps(), {x0.size(0)}, generator,
                                on_generator.dtype(torch::kLong));
  const auto noise = torch::randn(x0.sizes(), generator, on_generator.dtype(torch::kFloat32));
  return epsilon_loss_at(model, schedule, x0, cond, t.to(x0.device()),
                         noise.to(x0.device(), x0.scalar_type()));
}

}  // namespace zest::unet
