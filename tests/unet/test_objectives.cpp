// The training objectives ([loss]: prediction target, min-SNR-γ, offset noise, zero terminal SNR, timestep
// range) and the v/sample-prediction samplers against diffusers' own code: tests/data/objectives/
// objectives_golden.safetensors, written by make_objectives_golden.py beside it from the reference sources.
#include "unet_test_util.h"

#include "models/hymotion/hymotion.h"
#include "models/unet/diffusion_objective.h"
#include "models/unet/scheduler.h"

#include <nlohmann/json.hpp>

#include <functional>
#include <iostream>

namespace zest::unet::test {
namespace {

const std::map<std::string, torch::Tensor>& objectives_golden() {
  static const auto* const golden = [] {
    auto* tensors = new std::map<std::string, torch::Tensor>();
    for (auto& [name, tensor] : safetensors::load_file(data_path("objectives/objectives_golden.safetensors")))
      (*tensors)[name] = tensor;
    return tensors;
  }();
  return *golden;
}

torch::Tensor objectives_tensor(const std::string& name) {
  const auto it = objectives_golden().find(name);
  if (it == objectives_golden().end()) throw Error("objectives golden: no tensor " + name);
  return it->second;
}

// SD's schedule fields as a scheduler_config.json, plus `fields`.
SchedulerConfig sd_scheduler(const nlohmann::json& fields, SchedulerConfig::Use use = SchedulerConfig::Use::sampling) {
  nlohmann::json config = {{"num_train_timesteps", 1000}, {"beta_start", 0.00085}, {"beta_end", 0.012},
                           {"beta_schedule", "scaled_linear"}};
  config.update(fields);
  return SchedulerConfig::from_json(config, "scheduler_config.json", use);
}

void expect_close(const torch::Tensor& actual, const torch::Tensor& expected, double tolerance, const std::string& what) {
  ASSERT_EQ(actual.sizes(), expected.sizes()) << what;
  const double diff = (actual.to(torch::kFloat64) - expected.to(torch::kFloat64)).abs().max().item<double>();
  const double scale = 1.0 + expected.to(torch::kFloat64).abs().max().item<double>();
  EXPECT_LE(diff, tolerance * scale) << what << ": max |difference| " << diff;
}

TEST(Objectives, RescaledBetasAreDiffusersZeroTerminalSnr) {
  for (const bool rescale : {false, true}) {
    const std::string tag = rescale ? "zsnr" : "sd";
    const auto schedule = sd_scheduler({{"rescale_betas_zero_snr", rescale}}).noise_schedule();
    expect_close(schedule.betas, objectives_tensor("schedule." + tag + ".betas"), 1e-7, tag + " betas");
    expect_close(schedule.alphas_cumprod, objectives_tensor("schedule." + tag + ".alphas_cumprod"), 1e-7, tag + " ᾱ");
  }
  const auto zsnr = sd_scheduler({{"rescale_betas_zero_snr", true}}).noise_schedule();
  EXPECT_EQ(zsnr.alphas_cumprod[-1].item<double>(), 0.0);  // zero SNR at the last timestep, exactly
  EXPECT_EQ(zsnr.betas[-1].item<double>(), 1.0);
}

TEST(Objectives, SnrIsComputeSnr) {
  for (const bool rescale : {false, true}) {
    const std::string tag = rescale ? "zsnr" : "sd";
    const auto schedule = sd_scheduler({{"rescale_betas_zero_snr", rescale}}).noise_schedule();
    expect_close(snr_at(schedule, objectives_tensor("snr." + tag + ".timesteps")), objectives_tensor("snr." + tag),
                 2e-6, tag + " snr");
  }
}

// Every combination of prediction × noise offset × min-SNR-γ × schedule: zest's loss of the same tensors is
// the training script's.
TEST(Objectives, EachLossOptionChangesTheLossAsTheTrainingScriptDoes) {
  const auto latents = objectives_tensor("loss.latents");
  const auto noise = objectives_tensor("loss.noise");
  const auto offset = objectives_tensor("loss.offset_noise");
  const auto prediction = objectives_tensor("loss.model_pred");
  int cases = 0;
  for (const bool rescale : {false, true}) {
    const std::string tag = rescale ? "zsnr" : "sd";
    for (const auto type : {PredictionType::epsilon, PredictionType::v_prediction, PredictionType::sample}) {
      for (const double noise_offset : {0.0, 0.1}) {
        for (const double gamma : {0.0, 5.0}) {
          DiffusionObjective objective;
          objective.schedule = sd_scheduler({{"rescale_betas_zero_snr", rescale}}).noise_schedule();
          objective.prediction = type;
          objective.snr_gamma = gamma;
          objective.noise_offset = noise_offset;
          const auto t = objectives_tensor(gamma > 0 ? "snr." + tag + ".timesteps" : "loss.timesteps");
          const std::string name = str("loss.", tag, ".", to_string(type), ".offset", noise_offset == 0 ? "0.0" : "0.1",
                                       ".gamma", gamma == 0 ? "0" : "5.0");
          const auto offset_applied = offset_noise(noise, offset, noise_offset);
          expect_close(prediction_target(type, objective.schedule, latents, offset_applied, t),
                       objectives_tensor(name + ".target"), 1e-6, name + " target");
          const auto loss = diffusion_loss_of(objective, prediction, latents, offset_applied, t);
          expect_close(loss.reshape({1}), objectives_tensor(name), 1e-6, name);
          ++cases;
        }
      }
    }
  }
  EXPECT_EQ(cases, 24);
}

TEST(Objectives, MinSnrWeightsPerPredictionType) {
  const auto schedule = NoiseSchedule::stable_diffusion();
  const auto t = torch::tensor({0, 400, 999}, torch::kLong);
  const auto snr = snr_at(schedule, t);
  const auto clipped = torch::clamp_max(snr, 5.0);
  EXPECT_TRUE(torch::allclose(min_snr_weights(PredictionType::epsilon, schedule, t, 5.0), clipped / snr));
  EXPECT_TRUE(torch::allclose(min_snr_weights(PredictionType::v_prediction, schedule, t, 5.0), clipped / (snr + 1)));
  EXPECT_TRUE(torch::allclose(min_snr_weights(PredictionType::sample, schedule, t, 5.0), clipped));
  // High-SNR (early) timesteps are down-weighted, low-SNR ones keep weight 1 (epsilon).
  const auto w = min_snr_weights(PredictionType::epsilon, schedule, t, 5.0);
  EXPECT_LT(w[0].item<double>(), 0.01);
  EXPECT_EQ(w[2].item<double>(), 1.0);
}

// A toy model output from the scaled input and the timestep, as the golden script's toy_output.
torch::Tensor run_toy_trajectory(Scheduler& scheduler) {
  torch::NoGradGuard no_grad;
  auto x = torch::tensor({1.0f, -0.5f, 0.25f}).reshape({1, 3}) * scheduler.init_noise_sigma();
  std::vector<torch::Tensor> trajectory;
  for (int64_t i = 0; i < scheduler.steps(); ++i) {
    const auto t = scheduler.timesteps()[i];
    const auto output = 0.5 * scheduler.scale_model_input(x, i) + 0.0002 * t;
    x = scheduler.step(output, i, x);
    trajectory.push_back(x.reshape({-1}));
  }
  return torch::stack(trajectory);
}

// v- and sample-prediction (and zero terminal SNR with trailing spacing) in DDIM, Euler and DPM-Solver++: every
// step's sample is the reference scheduler's step output for the same model outputs.
TEST(Objectives, SamplersFollowTheReferenceTrajectories) {
  const safetensors::Reader reader(data_path("objectives/objectives_golden.safetensors"));
  const auto cases = nlohmann::json::parse(reader.metadata().at("sampler_cases"));
  ASSERT_EQ(cases.size(), 10u);
  for (const auto& [name, fields] : cases.items()) {
    nlohmann::json config = fields;
    const int64_t steps = config["steps"].get<int64_t>();
    config.erase("steps");
    const SchedulerKind kind = name.rfind("ddim", 0) == 0    ? SchedulerKind::ddim
                               : name.rfind("euler", 0) == 0 ? SchedulerKind::euler
                                                             : SchedulerKind::dpmpp;
    const auto scheduler = make_scheduler(kind, SchedulerConfig::from_json(config, name), steps);
    expect_close(scheduler->timesteps(), objectives_tensor("sampler." + name + ".timesteps"), 0, name + " timesteps");
    expect_close(run_toy_trajectory(*scheduler), objectives_tensor("sampler." + name), 2e-5, name + " trajectory");
  }
}

TEST(Objectives, GuidanceRescaleIsRescaleNoiseCfg) {
  expect_close(rescale_guidance(objectives_tensor("guidance.guided"), objectives_tensor("guidance.cond"), 0.7),
               objectives_tensor("guidance.rescaled"), 1e-6, "rescale_noise_cfg");
}

// With every option at its default the objective draws and computes exactly the epsilon loss it replaced.
TEST(Objectives, TheDefaultObjectiveIsTheEpsilonLoss) {
  const auto golden = Golden::load();
  UNet2DConditionModel model(load_config("unet_tiny"));
  load_params(model, golden.params());
  auto g1 = at::detail::createCPUGenerator(3);
  auto g2 = at::detail::createCPUGenerator(3);
  const auto x0 = golden.input("sample");
  EXPECT_EQ(diffusion_loss(model, DiffusionObjective{}, x0, golden.cond(), g1).item<double>(),
            epsilon_loss(model, x0, golden.cond(), g2).item<double>());
}

// Timesteps are drawn from [min_timestep, max_timestep) only: with a one-step range the loss is that step's.
TEST(Objectives, TimestepRangeBoundsTheDrawnTimesteps) {
  const auto golden = Golden::load();
  UNet2DConditionModel model(load_config("unet_tiny"));
  load_params(model, golden.params());
  const auto x0 = golden.input("sample");
  DiffusionObjective objective;
  objective.min_timestep = 640;
  objective.max_timestep = 641;
  auto g1 = at::detail::createCPUGenerator(4);
  const double drawn = diffusion_loss(model, objective, x0, golden.cond(), g1).item<double>();
  auto g2 = at::detail::createCPUGenerator(4);
  (void)torch::randint(0, 1, {x0.size(0)}, g2, torch::kLong);  // the timestep draw, then the noise as drawn
  const auto noise = torch::randn(x0.sizes(), g2);
  const auto t = torch::full({x0.size(0)}, 640, torch::kLong);
  EXPECT_EQ(drawn, diffusion_loss_at(model, objective, x0, golden.cond(), t, noise).item<double>());
}

// A v-prediction UNet on a zero-terminal-SNR schedule with min-SNR-γ and offset noise learns: a few dozen Adam
// steps on one fixed batch (fixed t, one of them the zero-SNR timestep, and fixed offset noise) cut the loss.
TEST(Objectives, VPredictionTinyUNetTrains) {
  torch::manual_seed(21);
  UNet2DConditionModel model(load_config("unet_tiny"));
  const auto golden = Golden::load();
  DiffusionObjective objective;
  objective.schedule = sd_scheduler({{"rescale_betas_zero_snr", true}}).noise_schedule();
  objective.prediction = PredictionType::v_prediction;
  objective.snr_gamma = 5.0;
  objective.noise_offset = 0.05;
  auto gen = at::detail::createCPUGenerator(22);
  const auto x0 = torch::randn({2, 4, 8, 8}, gen);
  const auto noise = offset_noise(torch::randn({2, 4, 8, 8}, gen), torch::randn({2, 4, 1, 1}, gen), 0.05);
  const auto t = torch::tensor({150, 999}, torch::kLong);
  torch::optim::Adam adam(model.parameters(), torch::optim::AdamOptions(3e-3));
  double first = 0.0, last = 0.0;
  for (int step = 0; step < 30; ++step) {
    adam.zero_grad();
    const auto loss = diffusion_loss_at(model, objective, x0, golden.cond(), t, noise);
    loss.backward();
    adam.step();
    (step == 0 ? first : last) = loss.item<double>();
  }
  std::cout << "[objectives] v-prediction loss " << first << " -> " << last << " after 30 Adam steps\n";
  EXPECT_LT(last, 0.5 * first);
}

void expect_objective_error(const std::function<void()>& f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    for (const auto& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
}

LossConfig loss_of(const std::string& text) {
  auto root = ConfigTable::parse_string("[loss]\n" + text, "run.toml");
  auto table = root.table("loss");
  return LossConfig::from_toml(table);
}

TEST(Objectives, LossTableValuesAreChecked) {
  expect_objective_error([] { loss_of("snr_gamma = -1"); }, {"run.toml", "loss.snr_gamma", "must be >= 0"});
  expect_objective_error([] { loss_of("noise_offset = -0.1"); }, {"loss.noise_offset", "must be >= 0"});
  expect_objective_error([] { loss_of("prediction = \"v\""); }, {"loss.prediction", "v_prediction"});
  expect_objective_error([] { loss_of("min_timestep = 500\nmax_timestep = 500"); }, {"loss.max_timestep", "> min_timestep"});
  expect_objective_error([] { loss_of("max_time = 1.5"); }, {"loss.max_time", "(min_time, 1]"});
  expect_objective_error([] { loss_of("min_snr_gamma = 5"); }, {"min_snr_gamma", "snr_gamma"});
  const LossConfig c = loss_of("prediction = \"v_prediction\"\nsnr_gamma = 5\nnoise_offset = 0.1\n"
                               "rescale_betas_zero_snr = true\nmin_timestep = 10\nmax_timestep = 900");
  EXPECT_EQ(c.prediction, "v_prediction");
  EXPECT_EQ(c.snr_gamma, 5.0);
  EXPECT_EQ(c.rescale_betas_zero_snr, true);
  EXPECT_EQ(c.max_timestep, 900);
}

TEST(Objectives, TheObjectiveFollowsThePipelineAndTheLossTable) {
  const auto v_pipeline = sd_scheduler({{"prediction_type", "v_prediction"}, {"use_karras_sigmas", true}},
                                       SchedulerConfig::Use::training);  // a sampler-only option: fine for training
  EXPECT_EQ(diffusion_objective_for(loss_of(""), v_pipeline).prediction, PredictionType::v_prediction);
  EXPECT_EQ(diffusion_objective_for(loss_of("prediction = \"epsilon\""), v_pipeline).prediction, PredictionType::epsilon);
  const auto zsnr = diffusion_objective_for(loss_of("rescale_betas_zero_snr = true"), v_pipeline);
  EXPECT_EQ(zsnr.schedule.alphas_cumprod[-1].item<double>(), 0.0);
  EXPECT_EQ(zsnr.max_timestep, 1000);
  // The tiny SD1.5 pipeline's scheduler config, from the pipeline folder or its unet/.
  const std::string sd15 = data_path("sd_tiny/sd15");
  ASSERT_TRUE(pipeline_scheduler_config(sd15).has_value());
  EXPECT_EQ(pipeline_scheduler_config(sd15 + "/unet"), pipeline_scheduler_config(sd15));
  EXPECT_FALSE(pipeline_scheduler_config(data_path("unet_tiny.safetensors")).has_value());
  EXPECT_FALSE(pipeline_scheduler_config("").has_value());
}

TEST(Objectives, OptionsAnObjectiveDoesNotHaveAreOneClearMessage) {
  const auto sd = SchedulerConfig::stable_diffusion();
  expect_objective_error([&] { diffusion_objective_for(loss_of("max_timestep = 1001"), sd); },
                         {"run.toml: loss.max_timestep", "1000 timesteps"});
  expect_objective_error([&] { diffusion_objective_for(loss_of("min_timestep = 1000"), sd); }, {"loss.min_timestep"});
  expect_objective_error([&] { diffusion_objective_for(loss_of("max_time = 0.5"), sd); },
                         {"loss.max_time", "HY-Motion", "min_timestep"});
  expect_objective_error(
      [&] { diffusion_objective_for(loss_of("prediction = \"epsilon\"\nsnr_gamma = 5\nrescale_betas_zero_snr = true"), sd); },
      {"loss.snr_gamma", "v_prediction", "max_timestep = 999"});
  EXPECT_NO_THROW(diffusion_objective_for(
      loss_of("prediction = \"epsilon\"\nsnr_gamma = 5\nrescale_betas_zero_snr = true\nmax_timestep = 999"), sd));
  const ModelFamily& hymotion = model_family("hymotion");
  for (const std::string& line : {"snr_gamma = 5", "prediction = \"v_prediction\"", "noise_offset = 0.1",
                                  "rescale_betas_zero_snr = true", "max_timestep = 500"}) {
    const std::string key = line.substr(0, line.find(' '));
    expect_objective_error([&] { hymotion.make_training_loss(loss_of(line), ""); },
                           {"run.toml: loss." + key, "HY-Motion", "flow-matching", "min_time"});
  }
  EXPECT_NO_THROW(hymotion.make_training_loss(loss_of("min_time = 0.2\nmax_time = 0.8"), ""));
}

TEST(Objectives, FlowTimeRangeMapsTheDrawnTimes) {
  hymotion::TimeSampling sampling;
  sampling.min_time = 0.25;
  sampling.max_time = 0.5;
  auto g = at::detail::createCPUGenerator(9);
  const auto t = hymotion::sample_time(4096, sampling, g);
  EXPECT_GE(t.min().item<double>(), 0.25);
  EXPECT_LT(t.max().item<double>(), 0.5);
  auto g1 = at::detail::createCPUGenerator(9);
  auto g2 = at::detail::createCPUGenerator(9);
  EXPECT_TRUE(torch::equal(hymotion::sample_time(8, {}, g1), torch::rand({8}, g2)));  // the defaults change nothing
}

}  // namespace
}  // namespace zest::unet::test
