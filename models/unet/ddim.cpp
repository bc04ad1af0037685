// DDIM sampling (diffusers DDIMScheduler.step arithmetic, float32 schedule values as 0-dim tensors).
#include "models/unet/ddim.h"

#include "core/check.h"

namespace zest::unet {

namespace {

torch::Tensor cat_defined(const torch::Tensor& a, const torch::Tensor& b) {
  return a.defined() ? torch::cat({a, b}, 0) : a;
}

// [uncond ; cond] along the batch, for one guided forward.
UNetConditioning guidance_batch(const UNetConditioning& uncond, const UNetConditioning& cond) {
  return {cat_defined(uncond.encoder_hidden_states, cond.encoder_hidden_states),
          cat_defined(uncond.text_embeds, cond.text_embeds),
          cat_defined(uncond.time_ids, cond.time_ids)};
}

}  // namespace

torch::Tensor ddim_timesteps(const NoiseSchedule& schedule, const DdimOptions& options) {
  const int64_t train_steps = schedule.num_train_timesteps();
  ZEST_CHECK(options.steps > 0 && options.steps <= train_steps, "DDIM: steps must be in [1, ",
             train_steps, "], got ", options.steps);
  const int64_t ratio = train_steps / options.steps;
  const auto t = torch::arange(options.steps - 1, -1, -1, torch::kLong) * ratio + options.steps_offset;
  ZEST_CHECK(t.max().item<int64_t>() < train_steps, "DDIM: steps_offset ", options.steps_offset,
             " pushes the first timestep past ", train_steps - 1);
  return t;
}

torch::Tensor sample_ddim(const EpsilonFn& epsilon, const torch::Tensor& noise,
                          const NoiseSchedule& schedule, const DdimOptions& options,
                          torch::Generator* generator) {
  ZEST_CHECK(options.eta == 0.0 || generator != nullptr, "DDIM: eta > 0 needs a generator");
  torch::NoGradGuard no_grad;
  const auto acp = schedule.alphas_cumprod.to(noise.device());
  const auto final_alpha = options.set_alpha_to_one ? torch::ones({}, acp.options()) : acp[0];
  const int64_t ratio = schedule.num_train_timesteps() / options.steps;
  const auto timesteps = ddim_timesteps(schedule, options);
  const auto long_options = torch::TensorOptions().dtype(torch::kLong).device(noise.device());
  auto x = noise;
  for (int64_t i = 0; i < timesteps.size(0); ++i) {
    const int64_t t = timesteps[i].item<int64_t>();
    const int64_t prev = t - ratio;
    const auto alpha = acp[t];
    const auto alpha_prev = prev >= 0 ? acp[prev] : final_alpha;
    const auto eps = epsilon(x, torch::full({x.size(0)}, t, long_options));
    const auto beta = 1.0 - alpha;
    const auto x0 = (x - beta.sqrt() * eps) / alpha.sqrt();
    const auto variance = ((1.0 - alpha_prev) / beta) * (1.0 - alpha / alpha_prev);
    const auto std_dev = options.eta * variance.sqrt();
    x = alpha_prev.sqrt() * x0 + (1.0 - alpha_prev - std_dev * std_dev).sqrt() * eps;
    if (options.eta > 0.0) {
      const auto z = torch::randn(x.sizes(), *generator,
                                  torch::TensorOptions().device(generator->device()));
      x = x + std_dev * z.to(x.device(), x.scalar_type());
    }
  }
  return x;
}

torch::Tensor sample_ddim(UNet2DConditionModel& model, const torch::Tensor& noise,
                          const UNetConditioning& cond, const DdimOptions& options,
                          const std::optional<UNetConditioning>& uncond, torch::Generator* generator,
                          const NoiseSchedule& schedule) {
  const bool is_guided = options.guidance_scale > 1.0;
  ZEST_CHECK(!is_guided || uncond.has_value(),
             "DDIM: guidance_scale > 1 needs the unconditional conditioning");
  const auto both = is_guided ? guidance_batch(*uncond, cond) : cond;
  const EpsilonFn epsilon = [&](const torch::Tensor& x, const torch::Tensor& t) {
    if (!is_guided) return model.forward(x, t, cond);
    const auto eps = model.forward(torch::cat({x, x}, 0), torch::cat({t, t}, 0), both).chunk(2, 0);
    return eps[0] + options.guidance_scale * (eps[1] - eps[0]);
  };
  return sample_ddim(epsilon, noise, schedule, options, generator);
}

}  // namespace zest::unet
