// The shipped run files configs/*.toml: every one passes the same validation as `zest train`, the big
// ones carry the realistic settings the docs promise, the tiny ones stay CPU-sized, and the fine-tune
// ones start from released weights (pointed here at tiny generated folders of the same formats; they
// also train end to end in tests/finetune/test_roundtrip.cpp).
#include "common/temp_dir.h"
#include "finetune/finetune_test_util.h"
#include "models/model_resolve.h"
#include "train/run_config.h"

#include "engine/preflight.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include <filesystem>
#include <map>
#include <string>

namespace zest {
namespace {

namespace fs = std::filesystem;
using zest::testing::read_text;
using zest::testing::TempDir;
using zest::testing::write_diffusers_folder;
using zest::testing::write_hymotion_release;

// Fine-tune run files and the family of the released weights they start from.
const std::map<std::string, std::string> kFineTunes = {{"sd15_finetune", "unet"}, {"hymotion_finetune", "hymotion"}};

// The released weights the fine-tune runs name are not in CI: tiny folders of the same formats stand in.
struct TinyReleases {
  TempDir dir{"run_configs"};
  TinyReleases() {
    write_diffusers_folder(dir.sub("unet"), torch::kFloat32);
    write_hymotion_release(dir.sub("hymotion"));
  }
  std::vector<std::string> overrides(const std::string& name) const {
    if (!kFineTunes.count(name)) return {};
    return {"model.pretrained=\"" + dir.sub(kFineTunes.at(name)) + "\""};
  }
};

std::map<std::string, RunConfig> parse_all_configs() {
  static const TinyReleases tiny;
  std::map<std::string, RunConfig> configs;
  for (const auto& entry : fs::directory_iterator(fs::path(ZEST_SOURCE_DIR) / "configs")) {
    if (entry.path().extension() != ".toml") continue;
    const std::string name = entry.path().stem().string();
    configs[name] = parse_run_config(entry.path().string(), tiny.overrides(name));
  }
  return configs;
}

TEST(RunConfigs, EveryShippedFileParses) {
  std::map<std::string, RunConfig> configs;
  ASSERT_NO_THROW(configs = parse_all_configs());
  for (const char* name : {"hymotion_1b", "hymotion_lite", "hymotion_tiny", "unet_sd15", "unet_sdxl", "unet_tiny",
                           "sd15_finetune", "hymotion_finetune", "hymotion_10b"})
    EXPECT_EQ(configs.count(name), 1u) << "configs/" << name << ".toml is missing";
  for (const auto& [name, config] : configs) {
    // The model of each run file is of the family its file name says (a fine-tune: its weights' family).
    const ResolvedModel model = resolve_model(config.model);
    const std::string family = kFineTunes.count(name) ? kFineTunes.at(name) : name.substr(0, name.find('_'));
    EXPECT_EQ(model.family->name, family) << name;
    EXPECT_EQ(config.train.run_dir, "runs/" + name) << name;
  }
}

TEST(RunConfigs, FineTunesStartFromReleasedWeightsWithALowRateAndAnEma) {
  const auto configs = parse_all_configs();
  for (const auto& [name, family] : kFineTunes) {
    SCOPED_TRACE(name);
    const RunConfig& c = configs.at(name);
    EXPECT_TRUE(c.model.has_pretrained_folder());
    EXPECT_TRUE(c.model.name.empty() && c.model.config_path.empty());
    EXPECT_TRUE(c.model.strict);
    EXPECT_LE(c.optimizer.lr, 2e-5);
    EXPECT_GT(c.scheduler.warmup_steps, 0);
    EXPECT_TRUE(c.ema.enabled);
    EXPECT_GE(c.ema.decay, 0.999);
    EXPECT_TRUE(c.checkpoint.merge_at_end);
    EXPECT_GT(c.checkpoint.every_steps, 0);
    EXPECT_EQ(c.engine.stage, 2);
    // As shipped, the weights are expected in <repo>/weights/, resolved against configs/.
    const std::string text = read_text(std::string(ZEST_SOURCE_DIR) + "/configs/" + name + ".toml");
    EXPECT_NE(text.find("pretrained = \"../weights/"), std::string::npos);
  }
}

// The model too big for plain data parallel: at least 10 B parameters, stage 3, and on two H200s (139.8 GB
// free each) the pre-flight check refuses stage 0 before the model is built while stages 2 and 3 fit.
TEST(RunConfigs, TenBillionModelNeedsShardedParameters) {
  const auto configs = parse_all_configs();
  const RunConfig& c = configs.at("hymotion_10b");
  EXPECT_EQ(c.engine.stage, 3);
  const int64_t P = count_model_parameters(resolve_model(c.model));
  EXPECT_GE(P, 10'000'000'000);
  PreflightInputs in{{P, 2, 0, c.engine.precision, c.engine.reduce_dtype, 8}};
  EXPECT_NE(preflight_problem(in, 139'800'000'000, "GPU").find("stage 0 needs 186.2 GB"), std::string::npos)
      << preflight_problem(in, 139'800'000'000, "GPU");
  for (int stage : {2, 3}) {
    in.model_state.stage = stage;
    EXPECT_EQ(preflight_problem(in, 139'800'000'000, "GPU"), "") << "stage " << stage;
  }
}

// The commands a run file's comments show ("#   zest train configs/X.toml --set a.b=c ...") parse with their
// overrides: a comment that tells users to switch stage or offload must name a combination that works.
TEST(RunConfigs, OverridesShownInCommentsParse) {
  static const TinyReleases tiny;
  int commands = 0;
  for (const auto& entry : fs::directory_iterator(fs::path(ZEST_SOURCE_DIR) / "configs")) {
    if (entry.path().extension() != ".toml") continue;
    std::ifstream in(entry.path());
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("#", 0) != 0 || line.find("zest train configs/") == std::string::npos) continue;
      if (line.find("--set") == std::string::npos) continue;
      std::vector<std::string> overrides = tiny.overrides(entry.path().stem().string());
      std::istringstream words(line.substr(line.find("--set")));
      for (std::string word; words >> word;) {
        if (word != "--set") overrides.push_back(word);
      }
      SCOPED_TRACE(entry.path().string() + ": " + line);
      EXPECT_NO_THROW(parse_run_config(entry.path().string(), overrides));
      ++commands;
    }
  }
  EXPECT_GE(commands, 1);  // configs/hymotion_10b.toml shows the one-GPU offload run
}

TEST(RunConfigs, BigRunsUseRealisticSettings) {
  const auto configs = parse_all_configs();
  const std::map<std::string, std::pair<int, int>> batch_and_seq = {
      {"hymotion_1b", {32, 360}}, {"hymotion_lite", {32, 360}}, {"unet_sd15", {32, 0}}, {"unet_sdxl", {8, 0}}};
  for (const auto& [name, expected] : batch_and_seq) {
    SCOPED_TRACE(name);
    const RunConfig& c = configs.at(name);
    EXPECT_EQ(c.model.name, name);
    EXPECT_EQ(c.data.batch_size, expected.first);
    EXPECT_EQ(c.data.seq_len, expected.second);
    EXPECT_EQ(c.engine.stage, 2);
    EXPECT_EQ(c.engine.precision, Precision::bf16);
    EXPECT_EQ(c.engine.reduce_dtype, Precision::fp32);
    EXPECT_EQ(c.engine.activation_checkpointing, CheckpointPolicy::all);
    EXPECT_DOUBLE_EQ(c.engine.clip_norm, 1.0);
    EXPECT_EQ(c.optimizer.name, OptimizerKind::adamw);
    EXPECT_DOUBLE_EQ(c.optimizer.lr, 1e-4);
    EXPECT_DOUBLE_EQ(c.optimizer.beta1, 0.9);
    EXPECT_DOUBLE_EQ(c.optimizer.beta2, 0.999);
    EXPECT_DOUBLE_EQ(c.optimizer.weight_decay, 0.01);
    EXPECT_EQ(c.scheduler.name, ScheduleKind::cosine);
    EXPECT_GT(c.scheduler.warmup_steps, 0);
    EXPECT_EQ(c.scheduler.decay_steps, c.train.max_steps - c.scheduler.warmup_steps);
    EXPECT_GT(c.checkpoint.every_steps, 0);
  }
}

TEST(RunConfigs, TinyRunsAreCpuSized) {
  const auto configs = parse_all_configs();
  for (const char* name : {"hymotion_tiny", "unet_tiny"}) {
    SCOPED_TRACE(name);
    const RunConfig& c = configs.at(name);
    EXPECT_EQ(c.model.name, name);
    EXPECT_EQ(c.data.dir, std::string("datasets/") + name);
    EXPECT_EQ(c.engine.stage, 2);
    EXPECT_LE(c.train.max_steps, 100);
    EXPECT_GE(c.optimizer.lr, 1e-4);
    // A mid-run checkpoint to resume from, before the final one.
    EXPECT_GT(c.checkpoint.every_steps, 0);
    EXPECT_LT(c.checkpoint.every_steps, c.train.max_steps);
    EXPECT_EQ(c.checkpoint.dir, c.train.run_dir + "/checkpoints");
    EXPECT_LT(count_model_parameters(resolve_model(c.model)), 1'000'000);
  }
}

}  // namespace
}  // namespace zest
