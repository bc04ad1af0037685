// Mixed precision on HY-Motion: with bf16 parameters (what the engine gives a bf16 run) the model takes
// the float32 inputs the data loader produces, keeps norms, time embeddings and the loss in float32 as
// the reference does under autocast, and tracks the float32 golden vectors within bf16 rounding.
#include "hymotion_test_util.h"

#include "common/tensor_close.h"
#include "common/training_loss_precision.h"

#include <iostream>

namespace zest::hymotion::test {
namespace {

// bf16 keeps 8 significant bits (relative rounding 2^-9 ≈ 2e-3 per operation). Measured on the golden
// inputs: output 5.7e-3, worst gradient 4.5e-2, worst activation 6.2e-3 (relative L2). A time
// embedding computed in bf16 (t·1000 rounded to 8 bits) or a zeroed gradient shows up as errors of O(1).
constexpr double kBf16OutputTol = 2e-2;
constexpr double kGradTol = 1e-1;
constexpr double kActivationTol = 2e-2;

std::shared_ptr<HyMotionModel> golden_model_as(const Golden& golden, torch::Dtype dtype) {
  auto model = golden_model(golden);
  model->to(dtype);
  return model;
}

TEST(HyMotionPrecision, Bf16ForwardAndGradientsTrackFloat32Golden) {
  const Golden golden = Golden::load();
  auto model = golden_model_as(golden, torch::kBFloat16);
  const auto out = model->forward(golden.inputs());  // float32 inputs, bool masks
  EXPECT_EQ(out.scalar_type(), torch::kBFloat16);
  const double out_err = testing::relative_l2_error(out, golden.output("sample"));
  EXPECT_LE(out_err, kBf16OutputTol);

  out.to(torch::kFloat32).pow(2).mean().backward();
  double worst = 0;
  std::string worst_name;
  for (const auto& p : model->named_parameters()) {
    const auto& grad = p.value().grad();
    ASSERT_TRUE(grad.defined()) << p.key();
    EXPECT_EQ(grad.scalar_type(), torch::kBFloat16) << p.key();
    const auto& expected = golden.grads().at(p.key());
    if (expected.abs().max().item<double>() < 1e-9) continue;  // the refiner's k-norm bias: mathematically 0
    const double err = testing::relative_l2_error(grad, expected);
    EXPECT_LE(err, kGradTol) << "grad of " << p.key();
    if (err > worst) worst = err, worst_name = p.key();
  }
  std::cout << "[hymotion bf16] output rel err " << out_err << ", worst grad rel err " << worst << " ("
            << worst_name << ")\n";
}

TEST(HyMotionPrecision, Bf16IntermediateActivationsTrackFloat32Golden) {
  const Golden golden = Golden::load();
  auto model = golden_model_as(golden, torch::kBFloat16);
  std::map<std::string, torch::Tensor> debug;
  torch::NoGradGuard no_grad;
  model->forward(golden.inputs(), &debug);
  double worst = 0;
  for (const auto& [name, expected] : golden.debug()) {
    ASSERT_TRUE(debug.count(name)) << name;
    if (name.rfind("attn_mask", 0) == 0) {
      EXPECT_TRUE(torch::equal(debug.at(name), expected)) << name;  // built in float32, −inf kept
      continue;
    }
    const double err = testing::relative_l2_error(debug.at(name), expected);
    EXPECT_LE(err, kActivationTol) << name;
    worst = std::max(worst, err);
  }
  std::cout << "[hymotion bf16] worst activation rel err " << worst << "\n";
}

// The reference's float32 islands, as autocast runs them: LayerNorms compute and return float32 (the
// modulation after them runs in float32; the next Linear casts down), RMSNorm normalises in float32 and
// casts back before its weight, the sinusoidal embedding is float32, RoPE rotates in float32.
TEST(HyMotionPrecision, SensitivePartsRunInFloat32) {
  torch::manual_seed(3);
  const auto x32 = torch::randn({2, 5, 4, 8}) * 3 + 40;  // a large mean: bf16 statistics would lose it
  const auto x16 = x32.to(torch::kBFloat16);
  const auto exact = torch::layer_norm(x16.to(torch::kFloat32), {8}, {}, {}, 1e-6);
  const auto plain = layer_norm_plain(x16);
  EXPECT_EQ(plain.scalar_type(), torch::kFloat32);
  EXPECT_LE(max_abs_diff(plain, exact), 1e-5);
  // What the blocks run: the float32 norm and modulation, rounded once to the input's dtype.
  const auto shift = torch::randn({2, 1, 1, 8}).to(torch::kBFloat16), scale = torch::randn({2, 1, 1, 8}).to(torch::kBFloat16);
  const auto fused = norm_modulate(x16, shift, scale);
  EXPECT_EQ(fused.scalar_type(), torch::kBFloat16);
  EXPECT_TRUE(torch::equal(fused, modulate(exact, shift, scale).to(torch::kBFloat16)));

  const Init bf16{torch::TensorOptions().dtype(torch::kBFloat16)};
  const AffineLayerNorm affine(8, bf16);
  EXPECT_EQ(affine->forward(x16).scalar_type(), torch::kFloat32);
  const HeadNorm head_ln(QkNorm::layer, 8, bf16);
  EXPECT_EQ(head_ln->forward(x16).scalar_type(), torch::kFloat32);
  const HeadNorm rms(QkNorm::rms, 8, bf16);
  const auto rms_out = rms->forward(x16);
  EXPECT_EQ(rms_out.scalar_type(), torch::kBFloat16);  // the reference's type_as(x), then × weight
  const auto xf = x16.to(torch::kFloat32);
  const auto rms_exact = (xf * torch::rsqrt(xf.pow(2).mean(-1, true) + 1e-6)).to(torch::kBFloat16);
  EXPECT_TRUE(torch::equal(rms_out, rms_exact));

  const auto t = torch::tensor({0.3f, 0.85f});
  const auto emb = sinusoidal_embedding(t, 32, 1000.0);
  EXPECT_EQ(emb.scalar_type(), torch::kFloat32);
  const TimestepEncoder encoder(32, Act::silu, 1000.0, bf16);
  EXPECT_EQ(encoder->forward(t).scalar_type(), torch::kBFloat16);  // float32 sinusoid, bf16 Linear
}

// The training objective on a loader batch (float32 tensors, bool masks): the bf16 model's loss is a
// float32 scalar close to the float32 model's at the same draws, and backward reaches every parameter.
TEST(HyMotionPrecision, TrainingLossOnLoaderBatchInBf16) {
  const Golden golden = Golden::load();
  TensorMap batch;
  for (const char* name : {"x", "x_mask_temporal", "ctxt_input", "ctxt_mask_temporal", "vtxt_input"}) batch[name] = golden.input(name);
  testing::expect_bf16_training_loss_near_float32(family().training_loss, batch,
                                                  [&](torch::Dtype dtype) { return golden_model_as(golden, dtype); });
}

}  // namespace
}  // namespace zest::hymotion::test
