// The activation pre-flight check (engine/preflight_activations.h) on a made-up profile of 10 units of
// 1 GB saved and 0.1 GB of inputs per sample: the refusal names the batch's need, the policy, what is free,
// and each thing that fits — the largest batch, the same batch with every unit checkpointed, and a smaller
// batch with more accumulation steps for the same global batch — or says that nothing does.
#include "engine/preflight_activations.h"

#include <gtest/gtest.h>

namespace zest::testing {
namespace {

ActivationPlan ten_units(int64_t batch, int accumulation = 1) {
  ActivationPlan plan;
  for (int u = 0; u < 10; ++u) plan.profile.units.push_back({"unit" + std::to_string(u), 1e9, 1e8});
  plan.batch_size = batch;
  plan.accumulation_steps = accumulation;
  return plan;
}

TEST(ActivationMemory, PeakDuringBackwardUnderEachPolicy) {
  const ActivationPlan plan = ten_units(1);
  EXPECT_EQ(plan.bytes_with(1, CheckpointPolicy::none), 10'000'000'000);
  EXPECT_EQ(plan.bytes_with(3, CheckpointPolicy::none), 30'000'000'000);
  // At the last unit's backward: 9 units' inputs, its own, and its activations rebuilt.
  EXPECT_EQ(plan.bytes_with(1, CheckpointPolicy::all), 2'000'000'000);
  // every_k with k = 2 (units 0, 2, 4, 6, 8 checkpointed), at the last unit: 4 units' activations and 5
  // units' inputs kept before it, and its own activations.
  EXPECT_EQ(activation_bytes(plan.profile, 1, CheckpointPolicy::every_k, 2), 5'500'000'000);
}

TEST(ActivationPreflight, FitsOrNamesWhatDoes) {
  EXPECT_EQ(activation_problem(ten_units(8), 80'000'000'000, "GPU"), "");
  const std::string problem = activation_problem(ten_units(8, 2), 45'000'000'000, "GPU");
  for (const std::string part : {"data.batch_size = 8 needs about 80.0 GB of activations per micro-batch",
                                 "engine.activation_checkpointing = \"none\"", "this GPU has 45.0 GB free",
                                 "at most data.batch_size = 4 fits (40.0 GB of activations)",
                                 "data.batch_size = 8 fits with engine.activation_checkpointing = \"all\" (16.0 GB)",
                                 "data.batch_size = 4 with engine.accumulation_steps = 4 keeps the global batch (40.0 GB)"})
    EXPECT_NE(problem.find(part), std::string::npos) << "missing '" << part << "' in: " << problem;
}

TEST(ActivationPreflight, NothingFitsSaysSo) {
  const std::string problem = activation_problem(ten_units(2), 1'000'000'000, "GPU");
  EXPECT_NE(problem.find("even data.batch_size = 1 with engine.activation_checkpointing = \"all\" needs 2.0 GB"),
            std::string::npos) << problem;
}

TEST(ActivationPreflight, AlreadyCheckpointedAdvisesSmallerBatches) {
  ActivationPlan plan = ten_units(6);
  plan.policy = CheckpointPolicy::all;  // 2 GB per sample
  const std::string problem = activation_problem(plan, 7'000'000'000, "GPU");
  EXPECT_NE(problem.find("at most data.batch_size = 3 fits"), std::string::npos) << problem;
  EXPECT_EQ(problem.find("fits with engine.activation_checkpointing"), std::string::npos) << problem;
  EXPECT_NE(problem.find("data.batch_size = 3 with engine.accumulation_steps = 2"), std::string::npos) << problem;
}

}  // namespace
}  // namespace zest::testing
