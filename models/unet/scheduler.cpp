// DDIM, Euler and DPM-Solver++ (see scheduler.h): timestep spacing and σ tables as diffusers' set_timesteps
// builds them, the step arithmetic of each class's step() in float32 on the sample, the guided loop.
#include "models/unet/scheduler.h"

#include "core/check.h"

#include <cmath>

namespace zest::unet {
namespace {

// numpy's round (half to even), which diffusers' set_timesteps uses.
double round_half_even(double v) { return std::nearbyint(v); }

torch::Tensor as_tensor(const std::vector<double>& values) {
  return torch::tensor(values, torch::TensorOptions().dtype(torch::kFloat64)).to(torch::kFloat32);
}

std::string spacing_of(const SchedulerConfig& config, const char* fallback) {
  return config.timestep_spacing.value_or(fallback);
}

void check_steps(int64_t steps, int64_t train_steps) {
  ZEST_CHECK(steps >= 1 && steps <= train_steps, "scheduler: steps must be in [1, ", train_steps, "], got ", steps);
}

// "trailing": round(arange(T, 0, -T/n)) − 1.
std::vector<double> trailing(int64_t train_steps, int64_t steps) {
  const double ratio = static_cast<double>(train_steps) / static_cast<double>(steps);
  std::vector<double> t;
  for (double v = static_cast<double>(train_steps); v > 0 && static_cast<int64_t>(t.size()) < steps; v -= ratio) {
    t.push_back(round_half_even(v) - 1);
  }
  return t;
}

// σ = √((1−ᾱ)/ᾱ) per training timestep, computed in float32 as diffusers does. A zero-terminal-SNR schedule's
// last ᾱ (0) becomes 2⁻²⁴ as Euler's and DPM-Solver++'s constructors set it, so that the first σ is finite.
std::vector<double> train_sigmas(const SchedulerConfig& config) {
  auto acp = config.noise_schedule().alphas_cumprod.clone();
  if (config.rescale_betas_zero_snr) acp[-1] = std::ldexp(1.0, -24);
  const auto sigmas = ((1.0 - acp) / acp).pow(0.5).to(torch::kFloat64).contiguous();
  return {sigmas.data_ptr<double>(), sigmas.data_ptr<double>() + sigmas.numel()};
}

// np.interp(t, arange(len(table)), table) for t in [0, len − 1].
double interpolate(const std::vector<double>& table, double t) {
  const double clamped = std::clamp(t, 0.0, static_cast<double>(table.size() - 1));
  const auto low = static_cast<size_t>(std::floor(clamped));
  if (low + 1 >= table.size()) return table.back();
  const double frac = clamped - static_cast<double>(low);
  return table[low] + frac * (table[low + 1] - table[low]);
}

double final_sigma(const SchedulerConfig& config, const std::vector<double>& table) {
  return config.final_sigmas_type == "sigma_min" ? table.front() : 0.0;
}

// Float32 after each value, as diffusers stores its σ tables.
std::vector<double> to_float32(std::vector<double> values) {
  for (double& v : values) v = static_cast<float>(v);
  return values;
}

}  // namespace

SchedulerKind parse_scheduler_kind(const std::string& name) {
  if (name == "ddim") return SchedulerKind::ddim;
  if (name == "euler") return SchedulerKind::euler;
  if (name == "dpmpp") return SchedulerKind::dpmpp;
  ZEST_FAIL("unknown scheduler '", name, "'; expected ddim, euler or dpmpp");
}

const char* to_string(SchedulerKind kind) {
  switch (kind) {
    case SchedulerKind::ddim: return "ddim";
    case SchedulerKind::euler: return "euler";
    case SchedulerKind::dpmpp: return "dpmpp";
  }
  return "?";
}

SchedulerKind default_scheduler_kind(const SchedulerConfig& config) {
  if (config.class_name == "EulerDiscreteScheduler") return SchedulerKind::euler;
  if (config.class_name == "DPMSolverMultistepScheduler") return SchedulerKind::dpmpp;
  return SchedulerKind::ddim;
}

// ---- DDIM ----

DdimScheduler::DdimScheduler(const SchedulerConfig& config, int64_t steps) {
  const int64_t train = config.num_train_timesteps;
  check_steps(steps, train);
  alphas_cumprod_ = config.noise_schedule().alphas_cumprod.to(torch::kFloat64);
  ratio_ = train / steps;
  const std::string spacing = spacing_of(config, "leading");
  if (spacing == "leading") {
    for (int64_t i = steps - 1; i >= 0; --i) t_.push_back(i * ratio_ + config.steps_offset.value_or(0));
  } else if (spacing == "linspace") {
    for (int64_t i = steps - 1; i >= 0; --i) {
      const double v = steps == 1 ? 0.0 : static_cast<double>(train - 1) * static_cast<double>(i) / static_cast<double>(steps - 1);
      t_.push_back(static_cast<int64_t>(round_half_even(v)));
    }
  } else {
    for (const double v : trailing(train, steps)) t_.push_back(static_cast<int64_t>(v));
  }
  ZEST_CHECK(t_.front() < train, "DDIM: steps_offset ", config.steps_offset.value_or(0),
             " pushes the first timestep past ", train - 1);
  final_alpha_ = config.set_alpha_to_one.value_or(true) ? 1.0 : alphas_cumprod_[0].item<double>();
  clip_ = config.clip_sample.value_or(true);
  clip_range_ = config.clip_sample_range;
  prediction_ = config.prediction_type;
  timesteps_ = torch::tensor(t_, torch::kLong).to(torch::kFloat32);
}

torch::Tensor DdimScheduler::step(const torch::Tensor& output, int64_t step, const torch::Tensor& x) {
  const int64_t t = t_.at(static_cast<size_t>(step));
  const int64_t prev = t - ratio_;
  const double alpha = static_cast<float>(alphas_cumprod_[t].item<double>());
  const double alpha_prev = static_cast<float>(prev >= 0 ? alphas_cumprod_[prev].item<double>() : final_alpha_);
  const auto out = output.to(torch::kFloat32);
  const auto sample = x.to(torch::kFloat32);
  // x̂0 and ε̂ from the model output, as DDIMScheduler.step derives them for each prediction type.
  torch::Tensor x0, eps;
  switch (prediction_) {
    case PredictionType::epsilon:
      x0 = (sample - std::sqrt(1.0 - alpha) * out) / std::sqrt(alpha);
      eps = out;
      break;
    case PredictionType::sample:
      x0 = out;
      eps = (sample - std::sqrt(alpha) * x0) / std::sqrt(1.0 - alpha);
      break;
    case PredictionType::v_prediction:
      x0 = std::sqrt(alpha) * sample - std::sqrt(1.0 - alpha) * out;
      eps = std::sqrt(alpha) * out + std::sqrt(1.0 - alpha) * sample;
      break;
  }
  // The pipelines call step() without use_clipped_model_output: clipping x̂0 leaves ε̂ as derived above.
  if (clip_) x0 = x0.clamp(-clip_range_, clip_range_);
  return (std::sqrt(alpha_prev) * x0 + std::sqrt(1.0 - alpha_prev) * eps).to(x.scalar_type());
}

// ---- Euler ----

EulerScheduler::EulerScheduler(const SchedulerConfig& config, int64_t steps) : prediction_(config.prediction_type) {
  const int64_t train = config.num_train_timesteps;
  check_steps(steps, train);
  const std::string spacing = spacing_of(config, "linspace");
  std::vector<double> t;
  if (spacing == "linspace") {
    for (int64_t i = steps - 1; i >= 0; --i) {
      t.push_back(steps == 1 ? 0.0 : static_cast<float>(static_cast<double>(train - 1) * static_cast<double>(i) /
                                                          static_cast<double>(steps - 1)));
    }
  } else if (spacing == "leading") {
    const int64_t ratio = train / steps;
    for (int64_t i = steps - 1; i >= 0; --i) t.push_back(static_cast<double>(i * ratio + config.steps_offset.value_or(0)));
  } else {
    t = trailing(train, steps);
  }
  const std::vector<double> table = train_sigmas(config);
  for (const double v : t) sigmas_.push_back(interpolate(table, v));
  sigmas_.push_back(final_sigma(config, table));
  sigmas_ = to_float32(sigmas_);
  const double max_sigma = *std::max_element(sigmas_.begin(), sigmas_.end());
  init_sigma_ = spacing == "leading" ? std::sqrt(max_sigma * max_sigma + 1.0) : max_sigma;
  timesteps_ = as_tensor(t);
}

torch::Tensor EulerScheduler::scale_model_input(const torch::Tensor& x, int64_t step) const {
  const double sigma = sigmas_.at(static_cast<size_t>(step));
  return x / std::sqrt(sigma * sigma + 1.0);
}

torch::Tensor EulerScheduler::step(const torch::Tensor& output, int64_t step, const torch::Tensor& x) {
  const auto i = static_cast<size_t>(step);
  const double sigma = sigmas_.at(i);
  const double dt = sigmas_.at(i + 1) - sigma;
  const auto sample = x.to(torch::kFloat32);
  const auto out = output.to(torch::kFloat32);
  // ε̂: x̂0 = x − σ ε̂, so the derivative (x − x̂0)/σ is ε̂ itself: x ← x + ε̂·(σ_{i+1} − σ_i).
  if (prediction_ == PredictionType::epsilon) return (sample + out * dt).to(x.scalar_type());
  // v: x̂0 = −σ/√(σ²+1)·v + x/(σ²+1) (on the unscaled sample); sample: x̂0 is the output.
  const auto x0 = prediction_ == PredictionType::sample
                      ? out
                      : out * (-sigma / std::sqrt(sigma * sigma + 1.0)) + sample / (sigma * sigma + 1.0);
  const auto derivative = (sample - x0) / sigma;
  return (sample + derivative * dt).to(x.scalar_type());
}

// ---- DPM-Solver++ ----

DpmSolverScheduler::DpmSolverScheduler(const SchedulerConfig& config, int64_t steps) : config_(config) {
  const int64_t train = config.num_train_timesteps;
  check_steps(steps, train);
  const std::string spacing = spacing_of(config, "linspace");
  std::vector<double> t;
  if (spacing == "linspace") {  // linspace(0, T − 1, n + 1).round(), reversed, the last dropped
    for (int64_t i = steps; i >= 1; --i) {
      t.push_back(round_half_even(static_cast<double>(train - 1) * static_cast<double>(i) / static_cast<double>(steps)));
    }
  } else if (spacing == "leading") {
    const int64_t ratio = train / (steps + 1);
    for (int64_t i = steps; i >= 1; --i) t.push_back(static_cast<double>(i * ratio + config.steps_offset.value_or(0)));
  } else {
    t = trailing(train, steps);
  }
  const std::vector<double> table = train_sigmas(config);
  for (const double v : t) {
    ZEST_CHECK(v >= 0 && v < static_cast<double>(train), "DPM-Solver++: timestep ", v, " is outside [0, ", train - 1,
               "] (steps_offset too large?)");
    sigmas_.push_back(table.at(static_cast<size_t>(v)));
  }
  sigmas_.push_back(final_sigma(config, table));
  sigmas_ = to_float32(sigmas_);
  timesteps_ = as_tensor(t);
}

torch::Tensor DpmSolverScheduler::step(const torch::Tensor& output, int64_t step, const torch::Tensor& x) {
  const auto i = static_cast<size_t>(step);
  const int64_t n = steps();
  auto alpha_sigma = [](double sigma) {
    const double alpha = 1.0 / std::sqrt(sigma * sigma + 1.0);
    return std::pair{alpha, sigma * alpha};
  };
  const auto sample = x.to(torch::kFloat32);
  const auto [alpha_s0, sigma_s0] = alpha_sigma(sigmas_.at(i));
  const auto out = output.to(torch::kFloat32);
  // convert_model_output (dpmsolver++): x̂0 from ε̂, the output itself, or v.
  const auto x0 = config_.prediction_type == PredictionType::epsilon  ? (sample - sigma_s0 * out) / alpha_s0
                  : config_.prediction_type == PredictionType::sample ? out
                                                                      : alpha_s0 * sample - sigma_s0 * out;
  const bool lower_order_final =
      step == n - 1 && (config_.euler_at_final || (config_.lower_order_final && n < 15) || config_.final_sigmas_type == "zero");
  const bool first_order = config_.solver_order == 1 || lower_order_nums_ < 1 || lower_order_final;
  torch::Tensor next;
  if (sigmas_.at(i + 1) == 0.0) {
    next = x0;  // α_t = 1, σ_t = 0: the first-order update lands on x̂0
  } else {
    const auto [alpha_t, sigma_t] = alpha_sigma(sigmas_.at(i + 1));
    const double lambda_t = std::log(alpha_t) - std::log(sigma_t);
    const double lambda_s0 = std::log(alpha_s0) - std::log(sigma_s0);
    const double h = lambda_t - lambda_s0;
    const double phi = alpha_t * (std::exp(-h) - 1.0);
    if (first_order) {
      next = (sigma_t / sigma_s0) * sample - phi * x0;
    } else {
      const auto [alpha_s1, sigma_s1] = alpha_sigma(sigmas_.at(i - 1));
      const double lambda_s1 = std::log(alpha_s1) - std::log(sigma_s1);
      const double r0 = (lambda_s0 - lambda_s1) / h;
      const auto d1 = (x0 - previous_x0_) / r0;
      next = config_.solver_type == "midpoint"
                 ? (sigma_t / sigma_s0) * sample - phi * x0 - 0.5 * phi * d1
                 : (sigma_t / sigma_s0) * sample - phi * x0 + alpha_t * ((std::exp(-h) - 1.0) / h + 1.0) * d1;
    }
  }
  previous_x0_ = x0;
  if (lower_order_nums_ < config_.solver_order) ++lower_order_nums_;
  return next.to(x.scalar_type());
}

// ---- the loop ----

std::unique_ptr<Scheduler> make_scheduler(SchedulerKind kind, const SchedulerConfig& config, int64_t steps) {
  switch (kind) {
    case SchedulerKind::ddim: return std::make_unique<DdimScheduler>(config, steps);
    case SchedulerKind::euler: return std::make_unique<EulerScheduler>(config, steps);
    case SchedulerKind::dpmpp: return std::make_unique<DpmSolverScheduler>(config, steps);
  }
  ZEST_FAIL("unknown scheduler kind");
}

torch::Tensor run_scheduler(Scheduler& scheduler, const EpsilonFn& epsilon, const torch::Tensor& noise) {
  torch::NoGradGuard no_grad;
  auto x = noise * scheduler.init_noise_sigma();
  const auto timesteps = scheduler.timesteps().to(noise.device());
  for (int64_t i = 0; i < scheduler.steps(); ++i) {
    const auto t = timesteps[i].expand({x.size(0)}).contiguous();
    const auto eps = epsilon(scheduler.scale_model_input(x, i), t);
    x = scheduler.step(eps, i, x);
  }
  return x;
}

torch::Tensor rescale_guidance(const torch::Tensor& guided, const torch::Tensor& cond, double guidance_rescale) {
  std::vector<int64_t> per_sample;
  for (int64_t d = 1; d < guided.dim(); ++d) per_sample.push_back(d);
  const auto std_cond = cond.std(per_sample, /*unbiased=*/true, /*keepdim=*/true);
  const auto std_guided = guided.std(per_sample, /*unbiased=*/true, /*keepdim=*/true);
  const auto rescaled = guided * (std_cond / std_guided);
  return guidance_rescale * rescaled + (1 - guidance_rescale) * guided;
}

EpsilonFn guided_epsilon(UNet2DConditionModel& model, const UNetConditioning& cond, const UNetConditioning& uncond,
                         double guidance_scale, double guidance_rescale) {
  ZEST_CHECK(guidance_rescale >= 0 && guidance_rescale <= 1, "guidance rescale must be in [0, 1], got ", guidance_rescale);
  if (guidance_scale <= 1.0) {
    return [&model, cond](const torch::Tensor& x, const torch::Tensor& t) { return model.forward(x, t, cond); };
  }
  auto cat = [](const torch::Tensor& a, const torch::Tensor& b) { return a.defined() ? torch::cat({a, b}, 0) : a; };
  const UNetConditioning both{cat(uncond.encoder_hidden_states, cond.encoder_hidden_states),
                              cat(uncond.text_embeds, cond.text_embeds), cat(uncond.time_ids, cond.time_ids)};
  return [&model, both, guidance_scale, guidance_rescale](const torch::Tensor& x, const torch::Tensor& t) {
    const auto out = model.forward(torch::cat({x, x}, 0), torch::cat({t, t}, 0), both).chunk(2, 0);
    const auto guided = out[0] + guidance_scale * (out[1] - out[0]);
    return guidance_rescale > 0 ? rescale_guidance(guided, out[1], guidance_rescale) : guided;
  };
}

}  // namespace zest::unet
