// `zest sample --lora` on the tiny SD1.5 pipeline (tests/data/sd_tiny/sd15) with the adapters of a short LoRA
// run on its UNet: --lora-scale 0 draws the base pipeline's picture, scales 1 and 0.5 draw other pictures (the
// adapters reach the UNet, times the scale), and --lora-scale without --lora is one clear message.
#include "cli/cli_test_util.h"
#include "common/keep_thread_count.h"
#include "common/pixel_difference.h"
#include "common/png_pixels.h"
#include "common/temp_dir.h"
#include "core/config_reader.h"
#include "data/model_features.h"
#include "data/synth.h"
#include "models/lora_file.h"
#include "train/run_config.h"
#include "train/trainer.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <map>


namespace zest::lora_test {
namespace {

namespace fs = std::filesystem;
using zest::testing::CliResult;
using zest::testing::KeepThreadCount;
using zest::testing::kPixelRounding;
using zest::testing::largest_pixel_step;
using zest::testing::png_pixels;
using zest::testing::TempDir;

std::string sd15_pipeline() { return std::string(ZEST_TEST_DATA) + "/sd_tiny/sd15"; }

CliResult zest_sample(std::vector<std::string> args) {
  args.insert(args.begin(), {zest::testing::zest_binary(), "sample", "--pretrained", sd15_pipeline(), "--prompt",
                             "a red fox in the snow", "--steps", "3", "--size", "16x16", "--seed", "4", "--device", "cpu"});
  return zest::testing::run_cli(args);
}

// Two steps of LoRA training on the pipeline's UNet at a high rate, so that the adapters move the pictures.
std::string trained_lora_file(const TempDir& dir) {
  const KeepThreadCount threads;
  ConfigTable table = ConfigTable::parse_string(
      "[model]\npretrained = \"" + sd15_pipeline() + "/unet\"\n[data]\ndir = \"" + dir.sub("data") +
          "\"\nbatch_size = 2\nnum_workers = 1\n[engine]\ndevice = \"cpu\"\nprecision = \"fp32\"\n[optimizer]\nlr = 0.05\n"
          "[lora]\nrank = 2\n[train]\nmax_steps = 2\nrun_dir = \"" + dir.sub("run") + "\"\n",
      "run.toml");
  const RunConfig config = run_config_from_toml(table);
  SynthOptions synth;
  synth.samples = 4;
  synthesize_dataset(dir.sub("data"), model_features(resolve_run_model(config)), synth);
  run_training(config, TrainOptions{});
  return dir.sub("run") + "/" + kLoraFileName;
}

TEST(LoraSample, ScaleZeroDrawsTheBasePictureAndOtherScalesChangeIt) {
  TempDir dir("lora_sample");
  const std::string lora = trained_lora_file(dir);
  ASSERT_TRUE(fs::exists(lora));
  std::map<std::string, torch::Tensor> pictures;
  for (const auto& [name, extra] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"base", {}},
           {"scale_0", {"--lora", lora, "--lora-scale", "0"}},
           {"scale_1", {"--lora", lora}},
           {"scale_0.5", {"--lora", lora, "--lora-scale", "0.5"}}}) {
    std::vector<std::string> args = extra;
    args.insert(args.end(), {"-o", dir.sub(name + ".png")});
    const CliResult r = zest_sample(args);
    ASSERT_EQ(r.code(), 0) << name << ": " << r.describe();
    if (!extra.empty()) {
      EXPECT_NE(r.out.find("LoRA " + lora + ": "), std::string::npos) << r.out;
    }
    pictures[name] = png_pixels(dir.sub(name + ".png"));
    ASSERT_TRUE(pictures[name].defined());
  }
  // Scale 0 multiplies every adapter's output by zero: the base pipeline's pixels, exactly.
  EXPECT_TRUE(torch::equal(pictures["scale_0"], pictures["base"])) << "--lora-scale 0 is not the base pipeline";
  // Other pictures, not rounding (kPixelRounding): these adapters move pixels by tens of steps (measured: 77 at
  // scale 1, 40 at 0.5), and half the scale is another picture again.
  EXPECT_GT(largest_pixel_step(pictures["scale_1"], pictures["base"]), 8 * kPixelRounding);
  EXPECT_GT(largest_pixel_step(pictures["scale_0.5"], pictures["base"]), 8 * kPixelRounding);
  EXPECT_GT(largest_pixel_step(pictures["scale_0.5"], pictures["scale_1"]), 8 * kPixelRounding);
}

TEST(LoraSample, LoraScaleWithoutLoraIsOneClearMessage) {
  TempDir dir("lora_scale_alone");
  for (const char* scale : {"0.8", "1"}) {  // 1 is the default, but given without --lora it is still a mistake
    const CliResult r = zest_sample({"--lora-scale", scale, "-o", dir.sub("out.png")});
    EXPECT_EQ(r.code(), 1) << scale << ": " << r.describe();
    EXPECT_EQ(zest::testing::one_clear_error_line(r.err), "") << r.err;
    EXPECT_NE(r.err.find("--lora-scale needs --lora"), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(dir.sub("out.png")));
  }
}

}  // namespace
}  // namespace zest::lora_test
