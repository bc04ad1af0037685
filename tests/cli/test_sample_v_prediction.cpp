// `zest sample` with a zero-terminal-SNR v-prediction pipeline: the tiny SD1.5 folder with "prediction_type":
// "v_prediction", "rescale_betas_zero_snr": true and "timestep_spacing": "trailing" in its scheduler config,
// sampled with guidance rescale 0.7 by DDIM, Euler and DPM-Solver++. The pictures must be the committed ones
// (tests/data/sd_tiny/v_prediction/*.png, which the GPU machine's scripts/golden/check_v_prediction_pipeline.py
// compares with diffusers' pipeline), and diffusers' pixels when that script's output file is present.
#include "cli_test_util.h"
#include "common/pixel_difference.h"
#include "common/png_pixels.h"

#include "core/check.h"
#include "formats/safetensors.h"
#include "pipelines/sd_pipeline.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>


#include <fstream>

namespace zest::testing {
namespace {

namespace fs = std::filesystem;

const fs::path kSdTiny = fs::path(ZEST_TEST_DATA) / "sd_tiny";

// The tiny SD1.5 pipeline with the v-prediction fields (as check_v_prediction_pipeline.py's `folder` writes it).
fs::path v_prediction_folder() {
  const fs::path folder = fs::path(::testing::TempDir()) / "zest_sample_v" / "sd15_v";
  fs::remove_all(folder);
  fs::create_directories(folder.parent_path());
  fs::copy(kSdTiny / "sd15", folder, fs::copy_options::recursive);
  const fs::path config_path = folder / "scheduler" / "scheduler_config.json";
  nlohmann::json config = nlohmann::json::parse(std::ifstream(config_path));
  config.update({{"prediction_type", "v_prediction"}, {"rescale_betas_zero_snr", true}, {"timestep_spacing", "trailing"}});
  std::ofstream(config_path) << config.dump(2) << "\n";
  return folder;
}

SampleRequest v_request(const std::string& scheduler) {
  SampleRequest r;
  r.prompt = "a watercolor lighthouse, 1920s";
  r.steps = 4;
  r.guidance_scale = 7.5;
  r.guidance_rescale = 0.7;
  r.width = r.height = 16;
  r.seed = 7;
  r.scheduler = unet::parse_scheduler_kind(scheduler);
  return r;
}

TEST(SdSampleVPrediction, TheCliWritesTheCommittedPictures) {
  const fs::path folder = v_prediction_folder();
  const fs::path out = folder.parent_path() / "ddim.png";
  const auto r = run_cli({zest_binary(), "sample", "--pretrained", folder.string(), "--prompt",
                          "a watercolor lighthouse, 1920s", "--steps", "4", "--guidance", "7.5", "--guidance-rescale",
                          "0.7", "--size", "16x16", "--seed", "7", "--scheduler", "ddim", "--device", "cpu", "--dtype",
                          "fp32", "-o", out.string()});
  ASSERT_EQ(r.code(), 0) << r.describe();
  EXPECT_LE(largest_pixel_step(png_pixels(out), png_pixels(kSdTiny / "v_prediction" / "ddim.png")), kPixelRounding);
  SdPipeline p = load_sd_pipeline(folder, {}, torch::kCPU, torch::kFloat32);
  ASSERT_EQ(p.scheduler.prediction_type, unet::PredictionType::v_prediction);
  for (const std::string scheduler : {"euler", "dpmpp"}) {
    const auto ours = generate_images(p, v_request(scheduler))[0];
    EXPECT_TRUE(torch::equal(ours, png_pixels(kSdTiny / "v_prediction" / (scheduler + ".png")))) << scheduler;
  }
  // The guidance rescale and the prediction type each change the picture.
  auto plain = v_request("euler");
  plain.guidance_rescale = 0.0;
  EXPECT_FALSE(torch::equal(generate_images(p, plain)[0], png_pixels(kSdTiny / "v_prediction" / "euler.png")));
  p.scheduler.prediction_type = unet::PredictionType::epsilon;
  EXPECT_FALSE(torch::equal(generate_images(p, v_request("euler"))[0], png_pixels(kSdTiny / "v_prediction" / "euler.png")));
}

// diffusers' pixels, written on the GPU machine by check_v_prediction_pipeline.py check --out (skipped while absent).
TEST(SdSampleVPrediction, EqualsTheReferencePipelinesPixels) {
  const fs::path golden = kSdTiny / "golden_pixels_v_prediction.safetensors";
  if (!fs::exists(golden)) GTEST_SKIP() << golden << " not generated yet (scripts/golden/check_v_prediction_pipeline.py)";
  SdPipeline p = load_sd_pipeline(v_prediction_folder(), {}, torch::kCPU, torch::kFloat32);
  const safetensors::Reader reader(golden.string());
  for (const std::string scheduler : {"ddim", "euler", "dpmpp"}) {
    const auto ours = generate_images(p, v_request(scheduler))[0];
    const auto theirs = reader.read("sd15v_" + scheduler);
    ASSERT_EQ(ours.sizes(), theirs.sizes()) << scheduler;
    const auto diff = (ours.to(torch::kInt) - theirs.to(torch::kInt)).abs();
    EXPECT_LE(diff.max().item<int>(), 2) << scheduler;
    EXPECT_LE(diff.to(torch::kFloat).mean().item<double>(), 0.05) << scheduler;
  }
}

}  // namespace
}  // namespace zest::testing
