// The inference schedulers (models/unet/scheduler.h) against scripts/golden/scheduler_reference.py, an
// independent float64 re-derivation of each update rule: a toy ε̂(x, t) = 0.5·x + 0.0002·t run from a fixed
// x_T must land where the reference lands. Plus the timestep tables diffusers builds and config errors.
#include "core/check.h"
#include "models/unet/scheduler.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace zest::unet {
namespace {

torch::Tensor run_toy(Scheduler& scheduler) {
  const auto noise = torch::tensor({1.0f, -0.5f, 0.25f}).reshape({1, 3});
  const EpsilonFn eps = [](const torch::Tensor& x, const torch::Tensor& t) { return 0.5 * x + 0.0002 * t.unsqueeze(1); };
  return run_scheduler(scheduler, eps, noise).flatten();
}

SchedulerConfig config_of(const nlohmann::json& fields) {
  nlohmann::json base = {{"beta_start", 0.00085}, {"beta_end", 0.012}, {"beta_schedule", "scaled_linear"},
                         {"clip_sample", false}, {"set_alpha_to_one", false}};
  if (fields.is_object()) base.update(fields);
  return SchedulerConfig::from_json(base, "scheduler_config.json");
}

void expect_lands_on(SchedulerKind kind, const nlohmann::json& fields, int64_t steps, std::vector<double> expected) {
  const auto scheduler = make_scheduler(kind, config_of(fields), steps);
  const auto x = run_toy(*scheduler);
  for (int64_t i = 0; i < 3; ++i) {
    EXPECT_NEAR(x[i].item<double>(), expected[i], 2e-4 * (1.0 + std::abs(expected[i])))
        << to_string(kind) << " " << fields.dump() << " steps " << steps << " element " << i;
  }
}

// Numbers printed by scripts/golden/scheduler_reference.py.
TEST(Schedulers, DdimMatchesTheIndependentReference) {
  expect_lands_on(SchedulerKind::ddim, {{"steps_offset", 1}}, 10, {1.7596456, -1.61947676, 0.0700844206});
  expect_lands_on(SchedulerKind::ddim, {{"timestep_spacing", "trailing"}, {"set_alpha_to_one", true}}, 7,
                  {2.31116046, -2.50139356, -0.0951165482});
}

TEST(Schedulers, EulerMatchesTheIndependentReference) {
  expect_lands_on(SchedulerKind::euler, {}, 10, {2.23007873, -2.3661527, -0.068036983});
  expect_lands_on(SchedulerKind::euler, {{"timestep_spacing", "leading"}, {"steps_offset", 1}}, 7,
                  {1.58293574, -1.41102093, 0.0859574051});
}

TEST(Schedulers, DpmSolverMatchesTheIndependentReference) {
  expect_lands_on(SchedulerKind::dpmpp, {}, 10, {2.06213459, -2.0289759, 0.0165793475});
  expect_lands_on(SchedulerKind::dpmpp, {}, 20, {2.05925992, -2.00055984, 0.02935004});
  expect_lands_on(SchedulerKind::dpmpp, {{"timestep_spacing", "leading"}, {"steps_offset", 1}, {"solver_type", "heun"}},
                  6, {1.49407232, -1.23400327, 0.130034525});
}

// final_sigmas_type = "sigma_min" ends on the schedule's smallest sigma instead of 0: the last step is then
// a real step, first order under 15 steps (lower_order_final) and second order from 15 on. 10 to 16
// steps cover both sides of that threshold.
TEST(Schedulers, DpmSolverLowerOrderFinalThresholdMatchesTheReference) {
  const std::vector<std::vector<double>> expected = {
      {2.09590084, -2.06081773, 0.0175415561}, {2.09448291, -2.05366307, 0.0204099209},
      {2.09322394, -2.04732418, 0.0229498784}, {2.09285878, -2.04401379, 0.0244224976},
      {2.09214217, -2.04000954, 0.0260663135}, {2.12465848, -2.04444828, 0.0401051004},
      {2.12225502, -2.04253447, 0.0398602741}};
  for (int64_t steps = 10; steps <= 16; ++steps)
    expect_lands_on(SchedulerKind::dpmpp, {{"final_sigmas_type", "sigma_min"}}, steps,
                    expected[static_cast<size_t>(steps - 10)]);
}

// The timestep tables diffusers' set_timesteps gives for SD-style configurations (values from its formulas).
TEST(Schedulers, TimestepsAsDiffusersSpacesThem) {
  const auto sd = SchedulerConfig::stable_diffusion();
  EXPECT_TRUE(torch::equal(make_scheduler(SchedulerKind::ddim, sd, 4)->timesteps(),
                           torch::tensor({751.0f, 501.0f, 251.0f, 1.0f})));
  EXPECT_TRUE(torch::allclose(make_scheduler(SchedulerKind::euler, sd, 4)->timesteps(),
                              torch::tensor({999.0f, 666.0f, 333.0f, 0.0f})));
  EXPECT_TRUE(torch::equal(make_scheduler(SchedulerKind::dpmpp, sd, 4)->timesteps(),
                           torch::tensor({999.0f, 749.0f, 500.0f, 250.0f})));
  // Euler "linspace": x_T is scaled by σ_max itself; "leading": by √(σ_max² + 1).
  EulerScheduler linspace(config_of({}), 4);
  EXPECT_NEAR(linspace.init_noise_sigma(), linspace.sigmas().front(), 1e-6);
  EXPECT_NEAR(linspace.sigmas().front(), 14.6146, 1e-3);  // σ at t = 999 of the SD schedule
  EXPECT_EQ(linspace.sigmas().back(), 0.0);
}

TEST(Schedulers, TheSamplersMatchTheExistingDdim) {
  // The DDIM scheduler and models/unet/ddim.h's sample_ddim agree on SD's configuration.
  const auto noise = torch::tensor({1.0f, -0.5f, 0.25f}).reshape({1, 3});
  const EpsilonFn eps = [](const torch::Tensor& x, const torch::Tensor& t) { return 0.5 * x + 0.0002 * t.unsqueeze(1); };
  DdimOptions options;
  options.steps = 10;
  const auto expected = sample_ddim(eps, noise, NoiseSchedule::scaled_linear(), options);
  DdimScheduler ddim(SchedulerConfig::stable_diffusion(), 10);
  EXPECT_TRUE(torch::allclose(run_scheduler(ddim, eps, noise), expected, 1e-5, 1e-6));
}

TEST(Schedulers, PipelineClassPicksTheDefault) {
  EXPECT_EQ(default_scheduler_kind(config_of({{"_class_name", "EulerDiscreteScheduler"}})), SchedulerKind::euler);
  EXPECT_EQ(default_scheduler_kind(config_of({{"_class_name", "DPMSolverMultistepScheduler"}})), SchedulerKind::dpmpp);
  EXPECT_EQ(default_scheduler_kind(config_of({{"_class_name", "PNDMScheduler"}})), SchedulerKind::ddim);
}

void expect_error(const std::function<void()>& f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    for (const auto& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
}

TEST(Schedulers, UnsupportedOptionsAreOneClearMessage) {
  expect_error([] { parse_scheduler_kind("pndm"); }, {"unknown scheduler 'pndm'", "ddim, euler or dpmpp"});
  expect_error([] { config_of({{"prediction_type", "flow_prediction"}}); },
               {"scheduler_config.json: field 'prediction_type' must be one of \"epsilon\", \"v_prediction\" or \"sample\", "
                "got a string (\"flow_prediction\")"});
  expect_error([] { config_of({{"use_karras_sigmas", true}}); }, {"field 'use_karras_sigmas' is true"});
  expect_error([] { config_of({{"timestep_spacing", "uniform"}}); }, {"field 'timestep_spacing' must be one of", "\"trailing\""});
  expect_error([] { config_of({{"solver_order", 3}}); }, {"field 'solver_order' must be an integer in [1, 2], got an integer (3)"});
  expect_error([] { make_scheduler(SchedulerKind::euler, SchedulerConfig::stable_diffusion(), 0); },
               {"steps must be in [1, 1000]"});
}

}  // namespace
}  // namespace zest::unet
