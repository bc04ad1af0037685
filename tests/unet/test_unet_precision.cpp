// Mixed precision on the UNet: with bf16 parameters (what the engine gives a bf16 run) the model takes
// the float32 inputs the data loader produces, keeps GroupNorm/LayerNorm, the sinusoidal embeddings
// and the loss in float32 as diffusers does under autocast, and tracks the float32 golden vectors
// within bf16 rounding.
#include "unet_test_util.h"

#include "common/tensor_close.h"
#include "common/training_loss_precision.h"

#include <iostream>

namespace zest::unet::test {
namespace {

// bf16 keeps 8 significant bits (relative rounding 2^-9 ≈ 2e-3 per operation). Measured on the golden
// inputs: output 1.4e-2, worst gradient 1.1e-1 (a norm weight whose gradient sums many cancelling
// terms), worst activation 1.3e-2 (relative L2). A sinusoid computed in bf16 (t = 999 rounds to 1000)
// or a zeroed gradient shows up as errors of O(1).
constexpr double kOutputTol = 3e-2;
constexpr double kGradTol = 2.5e-1;
constexpr double kActivationTol = 3e-2;

std::unique_ptr<UNet2DConditionModel> golden_model_as(const Golden& golden, torch::Dtype dtype) {
  auto model = std::make_unique<UNet2DConditionModel>(load_config("unet_tiny"));
  load_params(*model, golden.params());
  model->to(dtype);
  return model;
}

TEST(UNetPrecision, Bf16ForwardAndGradientsTrackFloat32Golden) {
  const auto golden = Golden::load();
  auto model = golden_model_as(golden, torch::kBFloat16);
  // float32 sample/conditioning and int64 timesteps, as in the golden file and from the data loader.
  const auto out = model->forward(golden.input("sample"), golden.input("timestep"), golden.cond());
  EXPECT_EQ(out.scalar_type(), torch::kBFloat16);
  const double out_err = testing::relative_l2_error(out, golden.output("sample"));
  EXPECT_LE(out_err, kOutputTol);

  out.to(torch::kFloat32).pow(2).mean().backward();
  double worst = 0;
  std::string worst_name;
  for (const auto& p : model->named_parameters()) {
    const auto& grad = p.value().grad();
    ASSERT_TRUE(grad.defined()) << p.key();
    EXPECT_EQ(grad.scalar_type(), torch::kBFloat16) << p.key();
    const double err = testing::relative_l2_error(grad, golden.grads().at(p.key()));
    EXPECT_LE(err, kGradTol) << "grad of " << p.key();
    if (err > worst) worst = err, worst_name = p.key();
  }
  std::cout << "[unet bf16] output rel err " << out_err << ", worst grad rel err " << worst << " (" << worst_name
            << ")\n";
}

TEST(UNetPrecision, Bf16IntermediateActivationsTrackFloat32Golden) {
  const auto golden = Golden::load();
  auto model = golden_model_as(golden, torch::kBFloat16);
  auto runner = std::make_shared<RecordingRunner>();
  model->set_unit_runner(runner);
  torch::NoGradGuard no_grad;
  model->forward(golden.input("sample"), golden.input("timestep"), golden.cond());
  const auto& debug = golden.debug();
  const auto& t = golden.input("timestep");
  std::map<std::string, torch::Tensor> got;
  got["time_embedding"] = model->embed_timesteps(t, torch::kBFloat16);
  got["add_embedding"] =
      model->embed_added_conditions(golden.input("text_embeds"), golden.input("time_ids"), torch::kBFloat16);
  got["conv_in"] = runner->call("embed").outputs[0];
  const auto units = model->unit_decls();
  for (const std::string block : {"down_blocks.0", "down_blocks.1", "down_blocks.2", "mid_block", "up_blocks.0",
                                  "up_blocks.1", "up_blocks.2"}) {
    std::string last;
    for (const auto& u : units) {
      if (u.name.rfind(block + ".", 0) == 0) last = u.name;
    }
    got[block] = runner->call(last).outputs.back();
  }
  double worst = 0;
  for (const auto& [name, tensor] : got) {
    EXPECT_EQ(tensor.scalar_type(), torch::kBFloat16) << name;
    const double err = testing::relative_l2_error(tensor, debug.at(name));
    EXPECT_LE(err, kActivationTol) << name;
    worst = std::max(worst, err);
  }
  std::cout << "[unet bf16] worst activation rel err " << worst << "\n";
}

// diffusers' float32 islands, as autocast runs them: GroupNorm and LayerNorm compute in float32 (the
// SiLU after them too; the next conv/Linear casts down, so they return that cast); the sinusoidal
// embeddings are float32 whatever the timestep dtype.
TEST(UNetPrecision, SensitivePartsRunInFloat32) {
  torch::manual_seed(3);
  const auto bf16 = torch::TensorOptions().dtype(torch::kBFloat16);
  const auto x16 = (torch::randn({2, 8, 4, 4}) * 3 + 40).to(torch::kBFloat16);
  // Computed in float32, returned in the input's dtype: exactly the float32 result rounded once (what
  // the next conv or Linear would cast it to), SiLU included when fused.
  const GroupNorm group_norm(4, 8, 1e-5, bf16);
  const auto f32 = torch::kFloat32;
  const auto exact_gn =
      torch::group_norm(x16.to(f32), 4, group_norm->weight.to(f32), group_norm->bias.to(f32), 1e-5);
  const auto gn = group_norm->forward(x16);
  EXPECT_EQ(gn.scalar_type(), torch::kBFloat16);
  EXPECT_TRUE(torch::equal(gn, exact_gn.to(torch::kBFloat16)));
  EXPECT_TRUE(torch::equal(group_norm->forward_silu(x16), torch::silu(exact_gn).to(torch::kBFloat16)));
  const LayerNorm layer_norm(4, 1e-5, bf16);
  const auto ln = layer_norm->forward(x16);
  EXPECT_EQ(ln.scalar_type(), torch::kBFloat16);
  EXPECT_TRUE(torch::equal(ln, torch::layer_norm(x16.to(f32), {4}, layer_norm->weight.to(f32), layer_norm->bias.to(f32),
                                                 1e-5).to(torch::kBFloat16)));

  const auto t = torch::tensor({10, 999}, torch::kLong);
  EXPECT_EQ(timestep_embedding(t, 8, true, 0.0).scalar_type(), torch::kFloat32);
  EXPECT_EQ(timestep_embedding(t.to(torch::kBFloat16), 8, true, 0.0).scalar_type(), torch::kFloat32);
}

// The training objective on a loader batch (float32 latents and conditioning): the bf16 model's loss
// is a float32 scalar close to the float32 model's at the same draws, and backward reaches every
// parameter.
TEST(UNetPrecision, TrainingLossOnLoaderBatchInBf16) {
  const auto golden = Golden::load();
  TensorMap batch;
  for (const char* name : {"sample", "encoder_hidden_states", "text_embeds", "time_ids"}) batch[name] = golden.input(name);
  testing::expect_bf16_training_loss_near_float32(family().training_loss, batch,
                                                  [&](torch::Dtype dtype) { return golden_model_as(golden, dtype); });
}

}  // namespace
}  // namespace zest::unet::test
