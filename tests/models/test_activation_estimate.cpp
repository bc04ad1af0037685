// The families' activation profiles (engine/activation_memory.h) against what a training step really
// holds on the CPU: the peak of live CPU allocations over a forward and backward (counted by a wrapper of
// LibTorch's CPU allocator), above what was live before it, within 15% on the tiny models, plain and
// with every unit checkpointed.
#include "common/cpu_allocation_counter.h"
#include "common/scoped_switch.h"
#include "core/check.h"
#include "core/config_reader.h"
#include "engine/activation_checkpoint.h"
#include "engine/activation_memory.h"
#include "models/hymotion/packed_tokens.h"
#include "models/registry.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdio>
#include <string>

namespace zest {
namespace {

struct Case {
  std::string flavor;
  int64_t batch = 4;
  SyntheticShapes shapes;
  CheckpointPolicy policy = CheckpointPolicy::none;
};

// Live bytes around each unit's forward (printed when the estimate is off, to see which unit is).
class UnitBytesRunner : public UnitRunner {
 public:
  UnitBytesRunner(const testing::CpuAllocationCounter& counter, std::shared_ptr<UnitRunner> inner)
      : counter_(counter), inner_(std::move(inner)) {}
  Tensors run(const std::string& unit_name, const UnitFn& fn, const Tensors& inputs) override {
    const int64_t before = counter_.live_bytes();
    Tensors out = inner_ ? inner_->run(unit_name, fn, inputs) : fn(inputs);
    if (torch::GradMode::is_enabled()) log += str(unit_name, " +", counter_.live_bytes() - before, "\n");
    return out;
  }
  std::string log;

 private:
  const testing::CpuAllocationCounter& counter_;
  std::shared_ptr<UnitRunner> inner_;
};

struct Outcome {
  int64_t measured = 0;
  int64_t estimated = 0;
  std::string units;
};

Outcome measure(const Case& c) {
  // The estimate is the bound of a batch whose every token is valid: HY-Motion's packed tokens
  // (models/hymotion/packed_tokens.h) keep less for the synthetic batches' shorter samples, so the padded
  // computation is what it describes.
  const testing::ScopedSwitch padded(hymotion::packed_tokens_enabled, hymotion::set_packed_tokens, false);
  const BuiltinModelConfig& builtin = builtin_model_config(c.flavor);
  const ModelFamily& family = model_family(builtin.family);
  ConfigTable config = ConfigTable::parse_string(builtin.toml_text, c.flavor);
  torch::manual_seed(0);
  const std::shared_ptr<UnitModule> model = family.build(config);
  model->train();
  std::vector<std::string> units;
  for (const UnitDecl& decl : model->unit_decls()) units.push_back(decl.name);
  testing::CpuAllocationCounter counter;
  const std::shared_ptr<UnitRunner> checkpointing =
      c.policy == CheckpointPolicy::none ? nullptr : std::make_shared<CheckpointRunner>(c.policy, 2, units);
  auto runner = std::make_shared<UnitBytesRunner>(counter, checkpointing);
  model->set_unit_runner(runner);
  torch::Generator generator = at::detail::createCPUGenerator(1);
  auto step = [&] {
    const TensorMap batch = family.synthetic_batch(*model, c.shapes, c.batch, torch::kCPU, generator);
    family.training_loss(*model, batch, generator).backward();
  };
  step();  // the parameters' gradients exist from here on (later steps accumulate in place)
  runner->log.clear();
  counter.reset_peak();
  const int64_t before = counter.live_bytes();
  step();
  Outcome outcome;
  outcome.measured = counter.peak_bytes() - before;
  outcome.units = runner->log;
  ActivationShapes shapes;
  shapes.length = c.shapes.length;
  shapes.text_tokens = c.shapes.text_tokens;
  shapes.precision = Precision::fp32;
  shapes.attention_keeps_probabilities = true;  // the CPU's math path
  ConfigTable again = ConfigTable::parse_string(builtin.toml_text, c.flavor);
  outcome.estimated = activation_bytes(family.activation_profile(again, shapes), c.batch, c.policy, 2);
  return outcome;
}

void expect_within_15_percent(const Case& c) {
  const Outcome o = measure(c);
  const double ratio = static_cast<double>(o.estimated) / static_cast<double>(o.measured);
  std::printf("%s batch %lld length %lld tokens %lld policy %s: measured %lld, estimated %lld (%.3f)\n",
              c.flavor.c_str(), static_cast<long long>(c.batch), static_cast<long long>(c.shapes.length),
              static_cast<long long>(c.shapes.text_tokens), to_string(c.policy), static_cast<long long>(o.measured),
              static_cast<long long>(o.estimated), ratio);
  EXPECT_GT(o.measured, 0);
  EXPECT_NEAR(ratio, 1.0, 0.15) << "per unit, live bytes after its forward:\n" << o.units;
}

TEST(ActivationEstimate, HyMotionTinyShortSequences) { expect_within_15_percent({"hymotion_tiny", 4, {24, 8}}); }
TEST(ActivationEstimate, HyMotionTinyLongSequences) { expect_within_15_percent({"hymotion_tiny", 2, {96, 16}}); }
TEST(ActivationEstimate, HyMotionTinyCheckpointed) {
  expect_within_15_percent({"hymotion_tiny", 4, {48, 8}, CheckpointPolicy::all});
}
TEST(ActivationEstimate, UNetTinySmallLatents) { expect_within_15_percent({"unet_tiny", 4, {8, 16}}); }
TEST(ActivationEstimate, UNetTinyLargerLatents) { expect_within_15_percent({"unet_tiny", 2, {16, 16}}); }
TEST(ActivationEstimate, UNetTinyCheckpointed) {
  expect_within_15_percent({"unet_tiny", 4, {16, 16}, CheckpointPolicy::all});
}

// The estimate grows with the batch exactly, and checkpointing every unit keeps less than none.
TEST(ActivationEstimate, ScalesWithBatchAndPolicy) {
  for (const std::string flavor : {"hymotion_1b", "unet_sd15"}) {
    const BuiltinModelConfig& builtin = builtin_model_config(flavor);
    ConfigTable config = ConfigTable::parse_string(builtin.toml_text, flavor);
    const ActivationProfile profile = model_family(builtin.family).activation_profile(config, ActivationShapes{});
    const int64_t one = activation_bytes(profile, 1, CheckpointPolicy::none, 2);
    EXPECT_NEAR(static_cast<double>(activation_bytes(profile, 8, CheckpointPolicy::none, 2)), 8.0 * one, 8.0) << flavor;
    EXPECT_LT(activation_bytes(profile, 1, CheckpointPolicy::all, 2), one / 2) << flavor;
    EXPECT_LT(activation_bytes(profile, 1, CheckpointPolicy::every_k, 2), one) << flavor;
  }
}

}  // namespace
}  // namespace zest
