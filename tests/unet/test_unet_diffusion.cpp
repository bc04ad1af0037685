// The UNet's training objective and sampler: the scaled-linear DDPM schedule, the epsilon loss
// (deterministic pieces and a short training run) and DDIM.
#include "unet_test_util.h"

#include <iostream>

namespace zest::unet::test {
namespace {

TEST(UNetDiffusion, ScaledLinearScheduleEndpoints) {
  const auto s = NoiseSchedule::scaled_linear();
  ASSERT_EQ(s.num_train_timesteps(), 1000);
  EXPECT_EQ(s.alphas_cumprod.scalar_type(), torch::kFloat32);
  EXPECT_NEAR(s.betas[0].item<double>(), 0.00085, 1e-9);
  EXPECT_NEAR(s.betas[999].item<double>(), 0.012, 1e-8);
  EXPECT_NEAR(s.alphas_cumprod[0].item<double>(), 0.99915, 1e-7);
  EXPECT_NEAR(s.alphas_cumprod[999].item<double>(), 0.0047, 5e-5);
  // Monotone decreasing.
  EXPECT_TRUE((s.alphas_cumprod.slice(0, 1) < s.alphas_cumprod.slice(0, 0, -1)).all().item<bool>());
}

TEST(UNetDiffusion, AddNoiseMixesPerSample) {
  const auto s = NoiseSchedule::scaled_linear();
  const auto x0 = torch::ones({2, 1, 2, 2});
  const auto noise = torch::full({2, 1, 2, 2}, 2.0);
  const auto t = torch::tensor({0, 999}, torch::kLong);
  const auto x_t = add_noise(s, x0, noise, t);
  for (int64_t b = 0; b < 2; ++b) {
    const double a = s.alphas_cumprod[t[b].item<int64_t>()].item<double>();
    EXPECT_NEAR(x_t[b][0][0][0].item<double>(), std::sqrt(a) + 2.0 * std::sqrt(1.0 - a), 1e-6);
  }
}

TEST(UNetDiffusion, EpsilonLossIsMseOfTheNoisePrediction) {
  const auto golden = Golden::load();
  UNet2DConditionModel model(load_config("unet_tiny"));
  load_params(model, golden.params());
  const auto s = NoiseSchedule::scaled_linear();
  const auto x0 = golden.input("sample");
  const auto noise = torch::randn(x0.sizes(), torch::Generator(at::detail::createCPUGenerator(5)));
  const auto t = torch::tensor({10, 700}, torch::kLong);
  const auto loss = epsilon_loss_at(model, s, x0, golden.cond(), t, noise);
  const auto prediction = model.forward(add_noise(s, x0, noise, t), t, golden.cond());
  EXPECT_NEAR(loss.item<double>(), (prediction - noise).pow(2).mean().item<double>(), 1e-7);

  // The generator drives t and ε: same seed, same loss; another seed, another loss.
  auto g1 = at::detail::createCPUGenerator(7);
  auto g2 = at::detail::createCPUGenerator(7);
  auto g3 = at::detail::createCPUGenerator(8);
  const double l1 = epsilon_loss(model, x0, golden.cond(), g1).item<double>();
  EXPECT_EQ(l1, epsilon_loss(model, x0, golden.cond(), g2).item<double>());
  EXPECT_NE(l1, epsilon_loss(model, x0, golden.cond(), g3).item<double>());
}

// A few dozen Adam steps on one fixed batch (fixed t and ε) must reduce the epsilon loss clearly.
TEST(UNetDiffusion, EpsilonLossDecreasesWhenTraining) {
  torch::manual_seed(11);
  UNet2DConditionModel model(load_config("unet_tiny"));
  const auto golden = Golden::load();
  const auto s = NoiseSchedule::scaled_linear();
  auto gen = at::detail::createCPUGenerator(12);
  const auto x0 = torch::randn({2, 4, 8, 8}, gen);
  const auto noise = torch::randn({2, 4, 8, 8}, gen);
  const auto t = torch::tensor({150, 600}, torch::kLong);
  torch::optim::Adam adam(model.parameters(), torch::optim::AdamOptions(3e-3));
  double first = 0.0, last = 0.0;
  for (int step = 0; step < 30; ++step) {
    adam.zero_grad();
    const auto loss = epsilon_loss_at(model, s, x0, golden.cond(), t, noise);
    loss.backward();
    adam.step();
    (step == 0 ? first : last) = loss.item<double>();
  }
  std::cout << "[unet training] epsilon loss " << first << " -> " << last << " after 30 Adam steps\n";
  EXPECT_LT(last, 0.5 * first);
}

TEST(UNetDiffusion, DdimTimestepsAreLeadingSpacedWithOffset) {
  const auto s = NoiseSchedule::scaled_linear();
  DdimOptions o;
  o.steps = 50;
  const auto t = ddim_timesteps(s, o);
  ASSERT_EQ(t.size(0), 50);
  EXPECT_EQ(t[0].item<int64_t>(), 981);
  EXPECT_EQ(t[49].item<int64_t>(), 1);
}

// For data concentrated at one point c, the ideal ε̂ makes DDIM (eta 0, last step to ᾱ = 1) land on c.
TEST(UNetDiffusion, DdimWithTheIdealDenoiserRecoversTheData) {
  const auto s = NoiseSchedule::scaled_linear();
  const auto c = torch::tensor({0.5f, -1.0f, 2.0f}).view({1, 3, 1, 1});
  const EpsilonFn ideal = [&](const torch::Tensor& x, const torch::Tensor& t) {
    const auto a = s.alphas_cumprod.index_select(0, t).view({-1, 1, 1, 1});
    return (x - a.sqrt() * c) / (1.0 - a).sqrt();
  };
  DdimOptions o;
  o.steps = 20;
  o.set_alpha_to_one = true;
  const auto noise = torch::randn({2, 3, 1, 1}, at::detail::createCPUGenerator(3));
  const auto x = sample_ddim(ideal, noise, s, o);
  EXPECT_LE(max_abs_diff(x, c.expand({2, 3, 1, 1})), 1e-4);
}

TEST(UNetDiffusion, DdimRunsTheModelWithGuidance) {
  const auto golden = Golden::load();
  UNet2DConditionModel model(load_config("unet_tiny"));
  load_params(model, golden.params());
  auto uncond = golden.cond();
  uncond.encoder_hidden_states = torch::zeros_like(uncond.encoder_hidden_states);
  DdimOptions o;
  o.steps = 3;
  o.eta = 0.5;
  o.guidance_scale = 5.0;
  auto g = at::detail::createCPUGenerator(9);
  const auto x = sample_ddim(model, golden.input("sample"), golden.cond(), o, uncond, &g);
  EXPECT_EQ(x.sizes(), golden.input("sample").sizes());
  EXPECT_TRUE(torch::isfinite(x).all().item<bool>());
  EXPECT_FALSE(x.requires_grad());
}

}  // namespace
}  // namespace zest::unet::test
