// HY-Motion training objective and sampler: the flow-matching loss ignores padded frames, the tiny model
// learns a fixed batch with Adam, and the Euler sampler / classifier-free guidance behave as specified.
#include "hymotion_test_util.h"

#include <ATen/CPUGeneratorImpl.h>

namespace zest::hymotion::test {
namespace {

torch::Generator generator(uint64_t seed) { return at::make_generator<at::CPUGeneratorImpl>(seed); }

TEST(HyMotionFlow, LossIgnoresPaddedFramesOnly) {
  const Golden golden = Golden::load();
  auto model = golden_model(golden);  // non-zero gates: frames interact through attention
  const auto in = golden.inputs();
  torch::NoGradGuard no_grad;
  auto loss_of = [&](const torch::Tensor& x1) {
    auto gen = generator(7);
    return flow_matching_loss(*model, x1, in.ctxt_input, in.vtxt_input, in.x_mask_temporal,
                              in.ctxt_mask_temporal, gen)
        .item<double>();
  };
  const double base = loss_of(in.x);
  // Sample 1 has 9 valid frames: frames 9..11 are padding.
  ASSERT_FALSE(in.x_mask_temporal[1][10].item<bool>());
  auto padded_changed = in.x.clone();
  padded_changed[1].narrow(0, 9, 3).copy_(torch::randn({3, 12}) * 5);
  EXPECT_NEAR(loss_of(padded_changed), base, 1e-6 * std::abs(base));
  auto valid_changed = in.x.clone();
  valid_changed[1][4] += 1.0;
  EXPECT_GT(std::abs(loss_of(valid_changed) - base), 1e-4);
}

TEST(HyMotionFlow, LossIsMeanSquaredVelocityErrorOverValidFrames) {
  const Golden golden = Golden::load();
  auto model = golden_model(golden);
  const auto in = golden.inputs();
  torch::NoGradGuard no_grad;
  const auto t = torch::tensor({0.25f, 0.6f});
  const auto noise = torch::randn(in.x.sizes());
  const double loss = flow_matching_loss_at(*model, in.x, in.ctxt_input, in.vtxt_input, in.x_mask_temporal,
                                            in.ctxt_mask_temporal, t, noise)
                          .item<double>();
  const auto tt = t.view({-1, 1, 1});
  const auto pred = model->forward({(1 - tt) * noise + tt * in.x, in.ctxt_input, in.vtxt_input, t,
                                    in.x_mask_temporal, in.ctxt_mask_temporal});
  const auto err = (pred - (in.x - noise)).pow(2);
  // Sample 0: all 12 frames valid; sample 1: the first 9.
  const double expected = (err[0].sum() + err[1].narrow(0, 0, 9).sum()).item<double>() / (21.0 * 12.0);
  EXPECT_NEAR(loss, expected, 1e-6 * expected);
}

TEST(HyMotionFlow, AdamStepsReduceLossOnFixedBatch) {
  torch::manual_seed(0);
  HyMotionModel model(load_config("hymotion_tiny"));
  const auto x1 = torch::randn({4, 12, 12});
  const auto ctxt = torch::randn({4, 6, 24});
  const auto vtxt = torch::randn({4, 1, 16});
  const auto x_mask = torch::arange(12).unsqueeze(0) < torch::tensor({12, 10, 8, 6}).unsqueeze(1);
  const auto ctxt_mask = torch::arange(6).unsqueeze(0) < torch::tensor({6, 5, 3, 2}).unsqueeze(1);
  torch::optim::Adam adam(model.parameters(), torch::optim::AdamOptions(3e-3));
  std::vector<double> losses;
  for (int step = 0; step < 40; ++step) {
    auto gen = generator(123);  // same t and noise every step: a fixed regression problem
    const auto loss = flow_matching_loss(model, x1, ctxt, vtxt, x_mask, ctxt_mask, gen,
                                         {TimeSampling::Kind::logit_normal, 0.0, 1.0});
    adam.zero_grad();
    loss.backward();
    adam.step();
    losses.push_back(loss.item<double>());
  }
  EXPECT_TRUE(std::isfinite(losses.back()));
  EXPECT_LT(losses.back(), 0.5 * losses.front()) << "first " << losses.front() << ", last " << losses.back();
}

TEST(HyMotionFlow, TimeSamplingIsSeededAndInRange) {
  auto g1 = generator(5), g2 = generator(5);
  const auto a = sample_time(1000, {TimeSampling::Kind::uniform}, g1);
  EXPECT_TRUE(torch::equal(a, sample_time(1000, {TimeSampling::Kind::uniform}, g2)));
  EXPECT_GE(a.min().item<float>(), 0.0f);
  EXPECT_LT(a.max().item<float>(), 1.0f);
  const auto b = sample_time(1000, {TimeSampling::Kind::logit_normal, 1.0, 0.5}, g1);
  EXPECT_GT(b.min().item<float>(), 0.0f);
  EXPECT_LT(b.max().item<float>(), 1.0f);
  EXPECT_NEAR(torch::logit(b).mean().item<double>(), 1.0, 0.1);
}

TEST(HyMotionFlow, EulerSamplerAndGuidance) {
  const Golden golden = Golden::load();
  auto model = golden_model(golden);
  const auto in = golden.inputs();
  const auto noise = torch::randn(in.x.sizes());
  auto sample = [&](int64_t steps, const Guidance& g) {
    return sample_euler(*model, noise, in.ctxt_input, in.vtxt_input, in.x_mask_temporal, in.ctxt_mask_temporal,
                        steps, g);
  };
  // One step from t = 0 is x0 + 1·v(x0, 0).
  torch::Tensor v0;
  {
    torch::NoGradGuard no_grad;
    v0 = model->forward({noise, in.ctxt_input, in.vtxt_input, torch::zeros({2}), in.x_mask_temporal,
                         in.ctxt_mask_temporal});
  }
  EXPECT_LE(max_abs_diff(sample(1, {}), noise + v0), 1e-6);
  const auto plain = sample(4, {});
  EXPECT_FALSE(plain.requires_grad());
  // Guidance whose "null" features equal the conditions changes nothing (v_u = v_c) ...
  Guidance same{5.0, in.vtxt_input[0].unsqueeze(0), in.ctxt_input[0][0].view({1, 1, -1})};
  auto one_cond = in;
  one_cond.vtxt_input = in.vtxt_input[0].unsqueeze(0).expand({2, 1, -1}).contiguous();
  one_cond.ctxt_input = in.ctxt_input[0][0].view({1, 1, -1}).expand({2, 6, -1}).contiguous();
  const auto a = sample_euler(*model, noise, one_cond.ctxt_input, one_cond.vtxt_input, in.x_mask_temporal,
                              in.ctxt_mask_temporal, 4, {});
  const auto b = sample_euler(*model, noise, one_cond.ctxt_input, one_cond.vtxt_input, in.x_mask_temporal,
                              in.ctxt_mask_temporal, 4, same);
  EXPECT_LE(max_abs_diff(a, b), 1e-5);
  // ... while real null features do.
  Guidance real{5.0, torch::zeros({1, 1, 16}), torch::zeros({1, 1, 24})};
  EXPECT_GT(max_abs_diff(sample(4, real), plain), 1e-3);
}

}  // namespace
}  // namespace zest::hymotion::test
