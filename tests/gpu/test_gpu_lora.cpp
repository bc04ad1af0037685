// LoRA on the GPU (ctest label `gpu`): the adapters of both tiny families train through the engine in bf16
// at stages 2 and 3 with their factors' gradients accumulated into the flat buffer's slots by the
// accumulating linear (kernels/linear_op.h: taken by every adapter backward), to what the same run with the fusion
// off trains them to (bf16 tolerance); the frozen base stays bit-unchanged on the device and gets no
// gradient; step 0 equals the base model on the GPU.
#include "common/scoped_switch.h"
#include "comm/world.h"
#include "engine/engine.h"
#include "lora/lora_test_util.h"
#include "kernels/linear_op.h"

#include <gtest/gtest.h>

namespace zest::lora_test {
namespace {

zest::testing::ScopedSwitch fusion_switch(bool on) { return {linear_grad_fusion_enabled, set_linear_grad_fusion, on}; }

struct GpuRun {
  std::map<std::string, torch::Tensor> adapters, base_before, base_after;
  torch::Tensor step0, base_output;
  int64_t fused_backwards = 0;
};

GpuRun train_on_gpu(const std::string& flavor, int stage, bool fused) {
  const auto fusion = fusion_switch(fused);
  auto model = tiny_model(flavor);
  const TensorMap host_inputs = fixed_inputs(flavor, *model, 4, 1);
  TensorMap inputs;
  for (const auto& [name, value] : host_inputs) inputs[name] = value.to(torch::kCUDA);
  GpuRun run;
  {
    torch::NoGradGuard no_grad;
    model->to(torch::kCUDA);
    run.base_output = forward(flavor, *model, inputs).to(torch::kFloat32).cpu();
    model->to(torch::kCPU);
  }
  attach_lora(*model, family_of_flavor(flavor).lora_targets, {4, 8.0, 0.0}, "test");
  freeze_all_but_adapters(*model);
  EngineConfig e;
  e.stage = stage;
  e.device = DeviceKind::cuda;
  e.precision = Precision::bf16;
  // SGD, not AdamW: AdamW's first steps move each element by about lr·sign(g), so the bf16 rounding of the two
  // backward paths flips the signs of near-zero gradients (lora_B starts at zero) and the runs part by up to
  // 2·lr an element (measured on one H200: up to 0.012 against values of 0.04); SGD's update is the gradient
  // itself, so the comparison sees the backward paths' own difference.
  OptimConfig o;
  o.name = OptimizerKind::sgd;
  o.lr = 1e-2;
  Engine engine(model, e, o, SchedulerConfig{}, world_communicator());
  run.base_before = base_of(*model);
  {
    torch::NoGradGuard no_grad;
    run.step0 = forward(flavor, *model, inputs).to(torch::kFloat32).cpu();
  }
  const auto before = linear_grad_fusion_counts();
  for (int step = 0; step < 4; ++step) {
    engine.backward((forward(flavor, *model, inputs).to(torch::kFloat32) - 0.5).square().mean());
    for (const auto& item : model->named_parameters())
      EXPECT_TRUE(is_adapter_parameter(item.key()) || !item.value().grad().defined()) << item.key();
    engine.step();
  }
  run.fused_backwards = linear_grad_fusion_counts().fused - before.fused;
  engine.gather_all_params();
  run.adapters = adapters_of(*model);
  run.base_after = base_of(*model);
  return run;
}

class GpuLora : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(GpuLora, FusedAdaptersTrainAsUnfusedAndTheBaseStaysFrozen) {
  const auto [flavor, stage] = GetParam();
  const GpuRun fused = train_on_gpu(flavor, stage, true);
  const GpuRun plain = train_on_gpu(flavor, stage, false);
  EXPECT_GT(fused.fused_backwards, 0) << "no adapter backward took the accumulating path";
  EXPECT_EQ(plain.fused_backwards, 0);
  // Step 0 is the base model (B = 0), up to the bf16 cast of the base.
  const double out_scale = fused.base_output.abs().max().item<double>();
  EXPECT_LE((fused.step0 - fused.base_output).abs().max().item<double>(), 2e-2 * out_scale);
  for (const auto& [name, before] : fused.base_before)
    EXPECT_TRUE(before.equal(fused.base_after.at(name))) << "frozen " << name << " changed";
  for (const auto& [name, value] : fused.adapters) {
    const auto& other = plain.adapters.at(name);
    const double scale = std::max(other.abs().max().item<double>(), 1e-2);
    EXPECT_LE((value.to(torch::kFloat32) - other.to(torch::kFloat32)).abs().max().item<double>(), 3e-2 * scale) << name;
  }
}

INSTANTIATE_TEST_SUITE_P(Families, GpuLora,
                         ::testing::Combine(::testing::Values("unet_tiny", "hymotion_tiny"), ::testing::Values(2, 3)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_stage" + std::to_string(std::get<1>(info.param));
                         });

}  // namespace
}  // namespace zest::lora_test
