// SchedulerConfig from scheduler_config.json (see scheduler_config.h).
#include "models/unet/scheduler_config.h"

#include "core/check.h"
#include "core/untrusted_file.h"
#include "formats/json_text.h"

#include <cmath>

namespace zest::unet {
namespace {

bool present(const nlohmann::json& config, const char* key) { return config.contains(key) && !config[key].is_null(); }

std::string read_choice(const nlohmann::json& config, const char* key, const std::string& path,
                        std::initializer_list<const char*> choices, const std::string& fallback) {
  if (!present(config, key)) return fallback;
  std::string list;
  for (const char* c : choices) {
    if (config[key] == c) return c;
    list += std::string(list.empty() ? "" : ", ") + "\"" + c + "\"";
  }
  ZEST_FAIL(path, ": \"", key, "\" is ", json_excerpt(config[key]), "; zest supports ", list);
}

bool read_bool(const nlohmann::json& config, const char* key, const std::string& path, bool fallback) {
  if (!present(config, key)) return fallback;
  if (!config[key].is_boolean()) ZEST_FAIL(path, ": \"", key, "\" is ", json_excerpt(config[key]), "; expected true or false");
  return config[key].get<bool>();
}

double read_number(const nlohmann::json& config, const char* key, const std::string& path, double fallback) {
  if (!present(config, key)) return fallback;
  if (!config[key].is_number() || !(config[key].get<double>() > 0) || !std::isfinite(config[key].get<double>())) {
    ZEST_FAIL(path, ": \"", key, "\" is ", json_excerpt(config[key]), "; expected a positive, finite number");
  }
  return config[key].get<double>();
}

int64_t read_int(const nlohmann::json& config, const char* key, const std::string& path, int64_t fallback,
                 int64_t min) {
  if (!present(config, key)) return fallback;
  if (!config[key].is_number_integer() || config[key].get<int64_t>() < min) {
    ZEST_FAIL(path, ": \"", key, "\" is ", json_excerpt(config[key]), "; expected an integer >= ", min);
  }
  return config[key].get<int64_t>();
}

// Options whose non-default value zest does not implement: refused rather than silently sampled wrong.
void refuse_unsupported(const nlohmann::json& config, const std::string& path, SchedulerConfig::Use use) {
  if (present(config, "trained_betas")) ZEST_FAIL(path, ": \"trained_betas\" is set; zest supports only null");
  if (use == SchedulerConfig::Use::training) return;  // the rest are the samplers' own arithmetic
  for (const char* key : {"use_karras_sigmas", "use_exponential_sigmas", "use_beta_sigmas", "use_lu_lambdas",
                          "use_flow_sigmas", "thresholding", "use_dynamic_shifting"}) {
    if (read_bool(config, key, path, false)) ZEST_FAIL(path, ": \"", key, "\" is true; zest's schedulers support only false");
  }
  read_choice(config, "interpolation_type", path, {"linear"}, "linear");
  read_choice(config, "timestep_type", path, {"discrete"}, "discrete");
  read_choice(config, "algorithm_type", path, {"dpmsolver++"}, "dpmsolver++");
  if (present(config, "variance_type")) ZEST_FAIL(path, ": \"variance_type\" is set; zest supports only null");
  if (present(config, "lambda_min_clipped") && !(config["lambda_min_clipped"].is_string() ||
                                                 config["lambda_min_clipped"].get<double>() < -1e30)) {
    ZEST_FAIL(path, ": \"lambda_min_clipped\" is ", json_excerpt(config["lambda_min_clipped"]), "; zest supports only -inf");
  }
}

// Bounds no real schedule comes near (diffusers' SD schedules: 1000 steps, betas 0.00085..0.012), so that a
// hostile scheduler_config.json cannot ask for gigabytes of schedule or give a schedule of NaNs.
constexpr int64_t kMaxTrainTimesteps = 100000;

void check_ranges(const SchedulerConfig& c, const std::string& path) {
  if (c.num_train_timesteps > kMaxTrainTimesteps)
    ZEST_FAIL(path, ": \"num_train_timesteps\" is ", c.num_train_timesteps, "; the largest value zest accepts is ",
              kMaxTrainTimesteps);
  for (const auto& [key, beta] : {std::pair{"beta_start", c.beta_start}, {"beta_end", c.beta_end}})
    if (!(beta < 1)) ZEST_FAIL(path, ": \"", key, "\" is ", beta, "; expected a noise variance in (0, 1)");
  if (c.steps_offset.value_or(0) >= c.num_train_timesteps)
    ZEST_FAIL(path, ": \"steps_offset\" is ", *c.steps_offset, "; expected less than \"num_train_timesteps\" (",
              c.num_train_timesteps, ")");
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

SchedulerConfig SchedulerConfig::from_json(const nlohmann::json& config, const std::string& path, Use use) {
  if (!config.is_object()) ZEST_FAIL(path, ": expected a JSON object of scheduler fields");
  refuse_unsupported(config, path, use);
  SchedulerConfig c;
  if (present(config, "_class_name") && config["_class_name"].is_string()) c.class_name = config["_class_name"];
  c.num_train_timesteps = read_int(config, "num_train_timesteps", path, c.num_train_timesteps, 2);
  c.beta_start = read_number(config, "beta_start", path, 0.0001);  // diffusers' class defaults
  c.beta_end = read_number(config, "beta_end", path, 0.02);
  c.beta_schedule = read_choice(config, "beta_schedule", path, {"scaled_linear", "linear"}, "linear");
  if (present(config, "timestep_spacing")) {
    c.timestep_spacing = read_choice(config, "timestep_spacing", path, {"leading", "linspace", "trailing"}, "");
  }
  if (present(config, "steps_offset")) c.steps_offset = read_int(config, "steps_offset", path, 0, 0);
  if (present(config, "set_alpha_to_one")) c.set_alpha_to_one = read_bool(config, "set_alpha_to_one", path, true);
  if (present(config, "clip_sample")) c.clip_sample = read_bool(config, "clip_sample", path, true);
  c.clip_sample_range = read_number(config, "clip_sample_range", path, 1.0);
  c.final_sigmas_type = read_choice(config, "final_sigmas_type", path, {"zero", "sigma_min"}, "zero");
  c.solver_order = read_int(config, "solver_order", path, 2, 1);
  if (c.solver_order > 2) ZEST_FAIL(path, ": \"solver_order\" is ", c.solver_order, "; zest supports 1 and 2");
  c.solver_type = read_choice(config, "solver_type", path, {"midpoint", "heun"}, "midpoint");
  c.lower_order_final = read_bool(config, "lower_order_final", path, true);
  c.euler_at_final = read_bool(config, "euler_at_final", path, false);
  c.prediction_type = *prediction_type_named(
      read_choice(config, "prediction_type", path, {"epsilon", "v_prediction", "sample"}, "epsilon"));
  c.rescale_betas_zero_snr = read_bool(config, "rescale_betas_zero_snr", path, false);
  check_ranges(c, path);
  return c;
}

SchedulerConfig SchedulerConfig::from_file(const std::filesystem::path& path, Use use) {
  return from_json(read_json_file(path.string(), "scheduler configuration"), printable(path.string()), use);
}

NoiseSchedule SchedulerConfig::noise_schedule() const {
  NoiseSchedule s = beta_schedule == "scaled_linear"
                        ? NoiseSchedule::scaled_linear(num_train_timesteps, beta_start, beta_end)
                        : NoiseSchedule::from_betas(torch::linspace(beta_start, beta_end, num_train_timesteps,
                                                                    torch::TensorOptions().dtype(torch::kFloat32)));
  return rescale_betas_zero_snr ? NoiseSchedule::from_betas(rescale_zero_terminal_snr(s.betas)) : s;
}

}  // namespace zest::unet
