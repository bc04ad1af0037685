// The settings a checkpoint records (optimizer, scheduler, precision) compared with the run's as TOML,
// key by key: every difference is one note in one list, in TOML spelling; another optimizer is an error.
#include "checkpoint/save.h"
#include "ckpt_test_util.h"
#include "thread_world.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace zest::testing {
namespace {

std::string joined(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& line : lines) out += line + "\n";
  return out;
}

TEST(CheckpointSettings, EveryChangedSettingIsANote) {
  run_ranks(1, [&](int, std::shared_ptr<Communicator> comm) {
    ToyRun run = make_toy_run(comm, {});
    const EngineState state = run.engine->state();
    checkpoint::Manifest m = checkpoint::describe_state(state, toy_save_request("unused"));
    m.optimizer.lr = 1e-3;
    m.optimizer.beta2 = 0.99;
    m.scheduler.warmup_steps += 1;
    m.precision = "bf16";
    const auto c = checkpoint::check_compatibility(m, state, toy_load_request("unused"));
    EXPECT_TRUE(c.errors.empty()) << joined(c.errors);
    const std::string notes = joined(c.notes);
    for (const std::string expected :
         {"optimizer.lr: 0.001 in the checkpoint, 0.003 now (the run's value applies)",
          "optimizer.betas: [ 0.9, 0.99 ] in the checkpoint, [ 0.9, 0.999 ] now (the run's value applies)",
          "scheduler.warmup_steps: ", "engine.precision: 'bf16' in the checkpoint, 'fp32' now"})
      EXPECT_NE(notes.find(expected), std::string::npos) << expected << " not in:\n" << notes;
    EXPECT_EQ(c.notes.size(), 4u) << notes;

    m.optimizer.name = OptimizerKind::sgd;
    const auto other = checkpoint::check_compatibility(m, state, toy_load_request("unused"));
    ASSERT_EQ(other.errors.size(), 1u) << joined(other.errors);
    EXPECT_EQ(other.errors[0], "optimizer: sgd in the checkpoint, adamw now (its state cannot be converted)");
  });
}

// The manifest records the engine's settings as its field table writes them, the kernel switches included
// ("config": {"engine": {..., "kernels": {...}}}), and a manifest read back keeps the record.
TEST(CheckpointSettings, ManifestRecordsTheEngineConfigAndItsKernels) {
  run_ranks(1, [&](int, std::shared_ptr<Communicator> comm) {
    ToyRun run = make_toy_run(comm, {});
    const EngineState state = run.engine->state();
    checkpoint::Manifest m = checkpoint::describe_state(state, toy_save_request("unused"));
    const auto config = nlohmann::json::parse(m.config_json);
    const auto& engine = config.at("engine");
    EXPECT_EQ(engine.at("stage"), 2) << m.config_json;
    EXPECT_EQ(engine.at("precision"), "fp32") << m.config_json;
    EXPECT_EQ(engine.at("kernels").at("qk_norm_rope"), true) << m.config_json;
    EXPECT_EQ(engine.at("kernels").at("conv_grad_fusion"), false) << m.config_json;
    EXPECT_EQ(engine.at("kernels").at("sdpa_backend"), "auto") << m.config_json;
    m.files = {{"rank_00000.safetensors", 8, 0}};
    const checkpoint::Manifest back = checkpoint::parse_manifest(checkpoint::to_json_text(m), "manifest.json");
    EXPECT_EQ(nlohmann::json::parse(back.config_json), config);
  });
}

}  // namespace
}  // namespace zest::testing
