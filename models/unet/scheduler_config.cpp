// SchedulerConfig from scheduler_config.json (see scheduler_config.h).
#include "models/unet/scheduler_config.h"

#include "core/check.h"
#include "core/untrusted_file.h"
#include "formats/json_field.h"
#include "formats/json_text.h"

#include <cmath>

namespace zest::unet {
namespace {

// Bounds no real schedule comes near (diffusers' SD schedules: 1000 steps, betas 0.00085..0.012), so that a
// hostile scheduler_config.json cannot ask for gigabytes of schedule or give a schedule of NaNs.
constexpr int64_t kMaxTrainTimesteps = 100000;

// Options whose non-default value zest does not implement: refused rather than silently sampled wrong.
void refuse_unsupported(const JsonField& config, SchedulerConfig::Use use) {
  if (config.has("trained_betas")) config.at("trained_betas").fail("is set; zest supports only null");
  if (use == SchedulerConfig::Use::training) return;  // the rest are the samplers' own arithmetic
  for (const char* key : {"use_karras_sigmas", "use_exponential_sigmas", "use_beta_sigmas", "use_lu_lambdas",
                          "use_flow_sigmas", "thresholding", "use_dynamic_shifting"}) {
    if (config.at(key).boolean_or(false)) config.at(key).fail("is true; zest's schedulers support only false");
  }
  config.at("interpolation_type").one_of_or("linear", {"linear"});
  config.at("timestep_type").one_of_or("discrete", {"discrete"});
  config.at("algorithm_type").one_of_or("dpmsolver++", {"dpmsolver++"});
  if (config.has("variance_type")) config.at("variance_type").fail("is set; zest supports only null");
  const JsonField lambda = config.at("lambda_min_clipped");  // -inf: Python writes "-inf" or a huge negative
  if (lambda.exists() && !lambda.is_string() && !(lambda.is_number() && lambda.number() < -1e30))
    lambda.expected("-inf (zest supports only -inf)");
}

}  // namespace

SchedulerConfig SchedulerConfig::stable_diffusion() {
  SchedulerConfig c;
  c.class_name = "PNDMScheduler";
  c.steps_offset = 1;
  c.set_alpha_to_one = false;
  c.clip_sample = false;
  return c;
}

SchedulerConfig SchedulerConfig::from_json(const JsonField& document, Use use) {
  const JsonField config = document.null_as_absent();  // null: Python's None, the class's default
  config.object();
  refuse_unsupported(config, use);
  SchedulerConfig c;
  if (config.at("_class_name").is_string()) c.class_name = config.at("_class_name").string();
  c.num_train_timesteps = config.at("num_train_timesteps").integer_or(c.num_train_timesteps, 2, kMaxTrainTimesteps);
  // β is a noise variance: in (0, 1). diffusers' class defaults when absent.
  c.beta_start = config.at("beta_start").number_or(0.0001, NumberRange::open(0, 1));
  c.beta_end = config.at("beta_end").number_or(0.02, NumberRange::open(0, 1));
  c.beta_schedule = config.at("beta_schedule").one_of_or("linear", {"scaled_linear", "linear"});
  if (config.has("timestep_spacing"))
    c.timestep_spacing = config.at("timestep_spacing").one_of({"leading", "linspace", "trailing"});
  if (config.has("steps_offset")) {
    c.steps_offset = config.at("steps_offset").integer(0);
    if (*c.steps_offset >= c.num_train_timesteps) {
      config.at("steps_offset").fail(str("is ", *c.steps_offset, "; it must be less than num_train_timesteps (",
                                         c.num_train_timesteps, ")"));
    }
  }
  if (config.has("set_alpha_to_one")) c.set_alpha_to_one = config.at("set_alpha_to_one").boolean();
  if (config.has("clip_sample")) c.clip_sample = config.at("clip_sample").boolean();
  c.clip_sample_range = config.at("clip_sample_range").number_or(1.0, NumberRange::positive());
  c.final_sigmas_type = config.at("final_sigmas_type").one_of_or("zero", {"zero", "sigma_min"});
  c.solver_order = config.at("solver_order").integer_or(2, 1, 2);
  c.solver_type = config.at("solver_type").one_of_or("midpoint", {"midpoint", "heun"});
  c.lower_order_final = config.at("lower_order_final").boolean_or(true);
  c.euler_at_final = config.at("euler_at_final").boolean_or(false);
  c.prediction_type =
      *prediction_type_named(config.at("prediction_type").one_of_or("epsilon", {"epsilon", "v_prediction", "sample"}));
  c.rescale_betas_zero_snr = config.at("rescale_betas_zero_snr").boolean_or(false);
  return c;
}

SchedulerConfig SchedulerConfig::from_file(const std::filesystem::path& path, Use use) {
  const nlohmann::ordered_json document = read_json_file(path.string(), "scheduler configuration");
  return from_json(JsonField(document, printable(path.string())), use);
}

NoiseSchedule SchedulerConfig::noise_schedule() const {
  NoiseSchedule s = beta_schedule == "scaled_linear"
                        ? NoiseSchedule::scaled_linear(num_train_timesteps, beta_start, beta_end)
                        : NoiseSchedule::from_betas(torch::linspace(beta_start, beta_end, num_train_timesteps,
                                                                    torch::TensorOptions().dtype(torch::kFloat32)));
  return rescale_betas_zero_snr ? NoiseSchedule::from_betas(rescale_zero_terminal_snr(s.betas)) : s;
}

}  // namespace zest::unet
