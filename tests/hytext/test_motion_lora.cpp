// HY-Motion LoRA through the CLI, on the CPU with tiny models: `zest train` with [lora] from a release draws its
// [sample] validation motions (.npy and skeleton GIFs) with the run's adapters on the release's network, and
// `zest sample --pretrained RELEASE --lora FILE` draws the same motions from the run's LoRA file. (A validation
// round that loads the adapters' file as full weights, a bug fixed in 7745031, fails the run here; one that draws
// without the adapters draws the release's own motions.)
#include "tiny_text_encoders.h"

#include "cli/cli_test_util.h"
#include "tests/finetune/finetune_test_util.h"

#include "formats/npy.h"
#include "models/lora_file.h"
#include "pipelines/motion_gif.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>

namespace zest::hytext::test {
namespace {

namespace fs = std::filesystem;
using zest::testing::CliResult;

CliResult zest_command(std::vector<std::string> args) {
  args.insert(args.begin(), zest::testing::zest_binary());
  zest::testing::CliOptions options;
  options.timeout_s = 120.0;
  return zest::testing::run_cli(args, options);
}

// The validation round's settings, given to `zest sample` too: one prompt, two motions of 6 frames.
const std::string kPrompt = "a person jumps";
const std::vector<std::string> kDrawn = {"--frames", "6", "--steps", "2", "-n", "2", "--seed", "5", "--device", "cpu"};

TEST(MotionLora, ValidationMotionsAreDrawnWithTheAdaptersAsZestSampleDrawsThem) {
  const fs::path w = fs::path(::testing::TempDir()) / "zest_motion_lora";
  fs::remove_all(w);
  fs::create_directories(w);
  // A release whose final layer and modulations are not zero, so that the adapters train and move the motions.
  zest::testing::write_hymotion_release((w / "release").string(), 13, kMotionFeatures, /*trained=*/true);
  write_tiny_text_encoders(w / "enc");
  std::ofstream(w / "run.toml") << "[model]\npretrained = \"" << (w / "release").string() << "\"\n"
                                << "[data]\ndir = \"" << (w / "data").string() << "\"\nbatch_size = 2\nnum_workers = 1\n"
                                << "seq_len = 12\n[engine]\nprecision = \"fp32\"\n[optimizer]\nlr = 0.05\n"
                                << "[lora]\nrank = 2\n"
                                << "[train]\nmax_steps = 2\nlog_every = 1\nrun_dir = \"" << (w / "run").string() << "\"\n"
                                << "[sample]\nevery_steps = 2\nprompts = [\"" << kPrompt << "\"]\ntext_encoders = \""
                                << (w / "enc").string() << "\"\nframes = 6\nsteps = 2\nnum_images = 2\nseed = 5\n";
  const CliResult synth = zest_command({"data", "synth", "--config", (w / "run.toml").string(), "--samples", "8"});
  ASSERT_EQ(synth.code(), 0) << synth.describe();
  const CliResult trained = zest_command({"train", (w / "run.toml").string()});
  ASSERT_EQ(trained.code(), 0) << trained.describe();

  // The validation round: the motions and a skeleton GIF of each, listed in metrics.jsonl.
  const fs::path samples = w / "run" / "samples";
  for (const char* name : {"step_00000002_prompt_0.npy", "step_00000002_prompt_0_0.gif", "step_00000002_prompt_0_1.gif"})
    EXPECT_TRUE(fs::exists(samples / name)) << name << "\n" << trained.describe();
  std::ifstream metrics(w / "run" / "metrics.jsonl");
  int rounds = 0;
  for (std::string line; std::getline(metrics, line);) {
    const auto record = nlohmann::json::parse(line);
    if (!record.contains("validation_samples")) continue;
    ++rounds;
    EXPECT_EQ(record.at("validation_samples")[0].at("file"), "samples/step_00000002_prompt_0.npy");
  }
  EXPECT_EQ(rounds, 1) << trained.describe();
  const std::string lora = (w / "run" / kLoraFileName).string();
  ASSERT_TRUE(fs::exists(lora)) << trained.describe();
  EXPECT_FALSE(fs::exists(samples / ".weights_for_samples.safetensors"));

  // The same prompt and settings through `zest sample`: with the run's LoRA file on the release, the validation
  // motions (the adapters of step 2 are the file's); without it, other motions.
  auto sample = [&](const std::vector<std::string>& lora_args, const std::string& out) {
    std::vector<std::string> args{"sample", "--pretrained", (w / "release").string(), "--prompt", kPrompt,
                                  "--text-encoders", (w / "enc").string(), "-o", (w / out).string()};
    args.insert(args.end(), kDrawn.begin(), kDrawn.end());
    args.insert(args.end(), lora_args.begin(), lora_args.end());
    const CliResult r = zest_command(args);
    EXPECT_EQ(r.code(), 0) << r.describe();
    return r;
  };
  const CliResult with_lora = sample({"--lora", lora}, "with_lora/motion.npy");
  EXPECT_NE(with_lora.out.find("LoRA " + lora + ": "), std::string::npos) << with_lora.out;
  for (const char* gif : {"motion_0.gif", "motion_1.gif"}) EXPECT_TRUE(fs::exists(w / "with_lora" / gif)) << gif;
  sample({}, "base/motion.npy");
  const torch::Tensor validation = npy::read((samples / "step_00000002_prompt_0.npy").string());
  const torch::Tensor drawn = npy::read((w / "with_lora" / "motion.npy").string());
  const torch::Tensor base = npy::read((w / "base" / "motion.npy").string());
  ASSERT_EQ(validation.sizes(), (std::vector<int64_t>{2, 6, kMotionFeatures}));
  ASSERT_EQ(drawn.sizes(), validation.sizes());
  // Measured: the validation motions equal the LoRA file's bit for bit, and lie 8% of the motions' largest value
  // away from the release's own.
  const double spread = base.abs().max().item<double>();
  EXPECT_LE((drawn - validation).abs().max().item<double>(), 1e-5 * spread)
      << "the validation motions are not those of the run's adapters";
  EXPECT_GT((base - validation).abs().max().item<double>(), 1e-2 * spread)
      << "the validation motions are the release's own: drawn without the adapters";
}

}  // namespace
}  // namespace zest::hytext::test
