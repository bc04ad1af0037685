// Run files end to end: RunConfig resolution with defaults, cross-table rules, --set overrides, and
// the built `zest config check` binary (exit status and output).
#include "core/check.h"
#include "core/config_reader.h"
#include "train/run_config.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sys/wait.h>

namespace zest {
namespace {

namespace fs = std::filesystem;

const std::string kMinimal = R"(
[model]
name = "hymotion_tiny"

[data]
dir = "data/motion"
)";

class RunConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("zest_cfg_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write(const std::string& name, const std::string& text) const {
    const fs::path path = dir_ / name;
    fs::create_directories(path.parent_path());
    std::ofstream(path) << text;
    return path.string();
  }
  RunConfig parse(const std::string& text, const std::vector<std::string>& overrides = {}) const {
    return parse_run_config(write("run.toml", text), overrides);
  }
  // Expects parse(text, overrides) to fail with a message holding every part; returns the message.
  std::string expect_error(const std::string& text, const std::vector<std::string>& parts,
                           const std::vector<std::string>& overrides = {}) const {
    try {
      parse(text, overrides);
    } catch (const Error& e) {
      const std::string message = e.what();
      for (const std::string& part : parts)
        EXPECT_NE(message.find(part), std::string::npos) << "message lacks '" << part << "':\n  " << message;
      return message;
    }
    ADD_FAILURE() << "expected an error mentioning '" << parts.front() << "'";
    return "";
  }
  std::string run_file() const { return (dir_ / "run.toml").string(); }

  fs::path dir_;
};

TEST_F(RunConfigTest, MinimalFileResolvesWithDefaults) {
  const RunConfig c = parse(kMinimal);
  EXPECT_EQ(c.source, run_file());
  EXPECT_EQ(c.model.name, "hymotion_tiny");
  EXPECT_TRUE(c.model.is_builtin());
  EXPECT_EQ(c.data.dir, "data/motion");
  EXPECT_EQ(c.data.batch_size, 1);
  EXPECT_EQ(c.engine.stage, 2);
  EXPECT_EQ(c.engine.precision, Precision::bf16);
  EXPECT_EQ(c.optimizer.name, OptimizerKind::adamw);
  EXPECT_EQ(c.scheduler.name, ScheduleKind::constant);
  EXPECT_EQ(c.train.max_steps, 1000);
  EXPECT_EQ(c.train.run_dir, "runs/zest");
  EXPECT_EQ(c.checkpoint.dir, "runs/zest/checkpoints");  // derived from train.run_dir
  EXPECT_TRUE(c.checkpoint.merge_at_end);
}

TEST_F(RunConfigTest, PrintedConfigHasEveryDefaultAndReadsBackTheSame) {
  const RunConfig c = parse(kMinimal + "[engine]\nprecision = \"fp32\"\n[scheduler]\nname = \"cosine\"\nwarmup_steps = 100\n");
  EXPECT_EQ(c.scheduler.decay_steps, 900);  // resolved: max_steps - warmup_steps
  const std::string text = to_toml(c);
  for (const char* expected : {"[model]\nname = \"hymotion_tiny\"", "stage = 2", "precision = \"fp32\"",
                               "device = \"auto\"", "betas = [0.9, 0.999]",
                               "decay_steps = 900", "keep_last = 3", "dir = \"runs/zest/checkpoints\""})
    EXPECT_NE(text.find(expected), std::string::npos) << "missing '" << expected << "' in\n" << text;
  const RunConfig back = parse(text);
  EXPECT_EQ(to_toml(back).substr(text.find("\n\n")), text.substr(text.find("\n\n")));
}

TEST_F(RunConfigTest, ModelConfigPathIsRelativeToTheRunFile) {
  write("models/m.toml", "num_layers = 2\n");
  const RunConfig c = parse("[model]\nconfig = \"models/m.toml\"\n[data]\ndir = \"d\"\n");
  EXPECT_FALSE(c.model.is_builtin());
  EXPECT_EQ(c.model.config_path, (dir_ / "models/m.toml").string());
  expect_error("[model]\nconfig = \"models/absent.toml\"\n[data]\ndir = \"d\"\n",
               {"run.toml:2:10: model.config: model configuration file not found", "models/absent.toml"});
}

TEST_F(RunConfigTest, ModelNeedsExactlyOneOfNameAndConfig) {
  write("m.toml", "");
  expect_error("[model]\nname = \"hymotion_tiny\"\nconfig = \"m.toml\"\n[data]\ndir = \"d\"\n",
               {"model.config: give either model.name (a built-in configuration) or model.config (a file), not both"});
  expect_error("[data]\ndir = \"d\"\n", {"[model]: needs name = \"<built-in configuration>\""});
  expect_error("[model]\nname = \"hymotion_tiyn\"\n[data]\ndir = \"d\"\n",
               {"run.toml:2:8: model.name: unknown built-in model configuration \"hymotion_tiyn\" (did you mean "
                "\"hymotion_tiny\"?)"});
}

TEST_F(RunConfigTest, UnknownSectionsAreErrorsWithSuggestions) {
  expect_error(kMinimal + "[optimiser]\nlr = 1e-3\n", {"run.toml:7:1: [optimiser]: unknown section (did you mean [optimizer]?)"});
  expect_error(kMinimal + "[zero_optimization]\nstage = 2\n",
               {"[zero_optimization]: unknown section (the ZeRO stage is [engine] stage)"});
  expect_error("gradient_clipping = 1.0\n" + kMinimal,
               {"run.toml:1:1: gradient_clipping: unknown key (zest calls it [engine] clip_norm)"});
  expect_error(kMinimal + "[train]\nmax_step = 10\n", {"train.max_step: unknown key (did you mean 'max_steps'?)"});
}

TEST_F(RunConfigTest, SectionErrors) {
  expect_error("[model]\nname = \"hymotion_tiny\"\n", {"run.toml: data.dir: required key is missing"});
  expect_error(kMinimal + "[data]\n", {"TOML syntax error"});  // [data] twice
  expect_error(kMinimal + "[train]\nmax_steps = 0\n", {"train.max_steps: must be >= 1"});
  expect_error(kMinimal + "[checkpoint]\nkeep_last = -1\n", {"checkpoint.keep_last: must be >= 0"});
  expect_error(kMinimal + "[checkpoint]\nasync = \"yes\"\n", {"checkpoint.async: expected a boolean (true/false), got a string"});
}

TEST_F(RunConfigTest, CrossTableRules) {
  expect_error(kMinimal + "[optimizer]\nlr = 1e-4\n[scheduler]\nname = \"cosine\"\nmin_lr = 1e-3\n",
               {"run.toml:11:10: scheduler.min_lr: must be <= optimizer.lr (0.001 > 1e-04)"});
  expect_error(kMinimal + "[train]\nmax_steps = 10\n[scheduler]\nwarmup_steps = 20\n",
               {"scheduler.warmup_steps: must be <= train.max_steps (10)"});
  expect_error(kMinimal + "[train]\nmax_steps = 10\n[scheduler]\nname = \"linear\"\nwarmup_steps = 10\n",
               {"a linear schedule needs train.max_steps > warmup_steps"});
}

TEST_F(RunConfigTest, OverridesAreValidatedLikeTheFile) {
  const RunConfig c = parse(kMinimal, {"engine.stage=1", "optimizer.betas=[0.9,0.95]", "engine.precision=fp32",
                                       "train.max_steps=20", "data.batch_size=4"});
  EXPECT_EQ(c.engine.stage, 1);
  EXPECT_DOUBLE_EQ(c.optimizer.beta2, 0.95);
  EXPECT_EQ(c.engine.precision, Precision::fp32);
  EXPECT_EQ(c.train.max_steps, 20);
  EXPECT_EQ(c.data.batch_size, 4);
  expect_error(kMinimal, {"--set engine.stage=5: engine.stage: must be 0, 1, 2 or 3 (got 5)"}, {"engine.stage=5"});
  expect_error(kMinimal, {"--set optimizer.betas=[0.9]: optimizer.betas: must have exactly 2 values"},
               {"optimizer.betas=[0.9]"});
  expect_error(kMinimal, {"[optimiser]: unknown section (did you mean [optimizer]?)"}, {"optimiser.lr=0.1"});
  expect_error(kMinimal, {"--set engine.stage: expected section.key=value"}, {"engine.stage"});
  expect_error(kMinimal, {"engine.loss_scale: [engine.loss_scale] is only used with precision = \"fp16\""},
               {"engine.loss_scale.window=10"});
}

// fp16 and fp8 products need a GPU: a run file asking for them where the run would execute on the CPU is
// refused at the key, with where they run; so is device = "cuda" without a GPU.
TEST_F(RunConfigTest, Fp16Fp8AndCudaAreRefusedWhereThereIsNoGpu) {
  if (is_cuda_available()) GTEST_SKIP() << "this machine has a GPU";
  expect_error(kMinimal + "[engine]\nprecision = \"fp16\"\n",
               {"engine.precision: fp16 runs on CUDA GPUs only", "use precision = \"bf16\" or \"fp32\""});
  expect_error(kMinimal, {"--set engine.device=cuda: engine.device: \"cuda\" was asked for, but this zest build or "
                          "machine has no CUDA GPU"}, {"engine.device=cuda"});
  expect_error(kMinimal + "[engine]\nprecision = \"fp16\"\ndevice = \"cpu\"\n", {"fp16 runs on CUDA GPUs only"});
  expect_error(kMinimal + "[engine]\nmatmul = \"fp8\"\n",
               {"engine.matmul: \"fp8\" products run on CUDA GPUs with fp8 tensor cores only",
                "use matmul = \"bf16\""});
}

// Runs `command` through the shell; returns its exit status and combined output.
std::pair<int, std::string> run_command(const std::string& command) {
  std::FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  EXPECT_NE(pipe, nullptr);
  std::string output;
  std::array<char, 4096> buffer{};
  while (size_t n = std::fread(buffer.data(), 1, buffer.size(), pipe)) output.append(buffer.data(), n);
  const int status = ::pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
}

TEST_F(RunConfigTest, ZestConfigCheckBinary) {
  const std::string zest = std::string(ZEST_BINARY_DIR) + "/zest";
  ASSERT_TRUE(fs::exists(zest)) << zest << " is missing: build the `zest` target";
  const std::string good = write("good.toml", kMinimal);
  const auto [good_status, good_out] = run_command(zest + " config check " + good + " --set engine.stage=1");
  EXPECT_EQ(good_status, 0) << good_out;
  EXPECT_NE(good_out.find("stage = 1"), std::string::npos) << good_out;
  EXPECT_NE(good_out.find("accumulation_steps = 1"), std::string::npos) << good_out;

  const std::string bad = write("bad.toml", kMinimal + "[engine]\nstage = 4\n");
  const auto [bad_status, bad_out] = run_command(zest + " config check " + bad);
  EXPECT_NE(bad_status, 0) << bad_out;
  EXPECT_NE(bad_out.find(bad + ":8:9: engine.stage: must be 0, 1, 2 or 3 (got 4)"), std::string::npos) << bad_out;

  const auto [set_status, set_out] = run_command(zest + " config check --set engine.stgae=1 " + good);
  EXPECT_NE(set_status, 0) << set_out;
  EXPECT_NE(set_out.find("engine.stgae: unknown key (did you mean 'stage'?)"), std::string::npos) << set_out;
}

// `zest config diff A B`: the keys whose resolved values differ, from the field tables (defaults written out,
// a key that applies on one side only shown absent on the other); `zest config reference` prints the docs'
// key table.
TEST_F(RunConfigTest, ZestConfigDiffAndReference) {
  const std::string zest = std::string(ZEST_BINARY_DIR) + "/zest";
  const std::string a = write("a.toml", kMinimal);
  const std::string b = write("b.toml", kMinimal + "[engine]\nstage = 3\n[engine.kernels]\nsplit_linear = false\n");
  const auto [status, out] = run_command(zest + " config diff " + a + " " + b);
  EXPECT_EQ(status, 0) << out;
  EXPECT_EQ(out, "engine.stage: 2 → 3\nengine.kernels.split_linear: true → false\n"
                 "engine.reshard_after_forward: (absent) → true\nengine.prefetch: (absent) → 1\n");
  const auto [same_status, same_out] = run_command(zest + " config diff " + a + " " + a + " --set train.seed=3");
  EXPECT_EQ(same_status, 0) << same_out;
  EXPECT_EQ(same_out, "no differences\n");
  const auto [ref_status, ref_out] = run_command(zest + " config reference");
  EXPECT_EQ(ref_status, 0) << ref_out;
  EXPECT_EQ(ref_out, config_reference_markdown());
}

// `zest config check` refuses what `zest train` refuses about the model before building it: a model
// configuration file that does not parse, a pretrained folder whose config.json holds an absurd field,
// and a NUL in a string (which would cut a path short).
TEST_F(RunConfigTest, ConfigCheckRefusesWhatTrainRefuses) {
  const std::string zest = std::string(ZEST_BINARY_DIR) + "/zest";
  write("models/broken.toml", "[model\nnum_layers = ");
  const std::string broken = write("broken_model.toml", "[model]\nconfig = \"models/broken.toml\"\n[data]\ndir = \"d\"\n");
  const auto [broken_status, broken_out] = run_command(zest + " config check " + broken);
  EXPECT_EQ(broken_status, 1) << broken_out;
  EXPECT_NE(broken_out.find("broken.toml:"), std::string::npos) << broken_out;

  const fs::path unet = fs::path(write("pipeline/unet/config.json", R"({"layers_per_block": 1000000000})")).parent_path();
  write("pipeline/unet/diffusion_pytorch_model.safetensors", "");
  const std::string absurd =
      write("absurd.toml", "[model]\npretrained = \"" + unet.string() + "\"\n[data]\ndir = \"d\"\n");
  const auto [absurd_status, absurd_out] = run_command(zest + " config check " + absurd);
  EXPECT_EQ(absurd_status, 1) << absurd_out;
  EXPECT_NE(absurd_out.find("layers_per_block"), std::string::npos) << absurd_out;
  EXPECT_NE(absurd_out.find("the largest value zest accepts is 64"), std::string::npos) << absurd_out;

  const std::string nul = write("nul.toml", kMinimal + "[train]\nrun_dir = \"runs/a\\u0000b\"\n");
  const auto [nul_status, nul_out] = run_command(zest + " config check " + nul);
  EXPECT_EQ(nul_status, 1) << nul_out;
  EXPECT_NE(nul_out.find("train.run_dir: contains a NUL character"), std::string::npos) << nul_out;
}

}  // namespace
}  // namespace zest
