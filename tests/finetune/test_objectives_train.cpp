// `zest train` with [loss] options end to end: a pipeline folder whose scheduler config says v_prediction on a
// zero-terminal-SNR schedule trains its UNet with that target (prediction "auto"), min-SNR-γ and offset noise
// (the log says which objective), and the loss falls; HY-Motion refuses a diffusion option naming the key.
#include "common/temp_dir.h"
#include "examples/zest_run.h"
#include "finetune_test_util.h"

#include <gtest/gtest.h>

namespace zest::testing {
namespace {

namespace fs = std::filesystem;

void write_objective_file(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << text;
}

TEST(FinetuneObjectives, VPredictionPipelineTrainsWithItsOwnPredictionType) {
  const TempDir work("ft_objectives");
  const fs::path w = work.path();
  write_diffusers_folder((w / "pipe" / "unet").string(), torch::kFloat32);
  write_objective_file(w / "pipe" / "scheduler" / "scheduler_config.json",
                       R"({"_class_name": "DDIMScheduler", "num_train_timesteps": 1000, "beta_start": 0.00085,
  "beta_end": 0.012, "beta_schedule": "scaled_linear", "prediction_type": "v_prediction",
  "rescale_betas_zero_snr": true, "timestep_spacing": "trailing", "use_karras_sigmas": true})");
  const auto synth = run_in(w, zest_binary() + " data synth --model unet_tiny --out data --samples 16");
  ASSERT_EQ(synth.status, 0) << synth.output;
  write_objective_file(w / "run.toml", R"([model]
pretrained = "pipe"
[data]
dir = "data"
batch_size = 4
num_workers = 0
[engine]
precision = "fp32"
threads = 1
[optimizer]
lr = 3e-3
[train]
max_steps = 20
log_every = 5
run_dir = "run"
[checkpoint]
merge_at_end = false
[loss]
snr_gamma = 5.0
noise_offset = 0.05
)");
  const auto train = run_in(w, zest_binary() + " train run.toml");
  ASSERT_EQ(train.status, 0) << train.output;
  EXPECT_NE(train.output.find("objective: v_prediction, min-SNR γ 5, noise offset 0.05, zero terminal SNR, timesteps "
                              "[0, 1000) on the noise schedule of "),
            std::string::npos)
      << train.output;
  const auto steps = logged_steps(w / "run" / "metrics.jsonl");
  ASSERT_EQ(steps.size(), 4u) << train.output;
  std::cout << "[objectives] zest train v-prediction loss " << steps.front().loss << " -> " << steps.back().loss << "\n";
  EXPECT_LT(steps.back().loss, 0.85 * steps.front().loss);
  // The min-SNR-weighted v loss (weights ≤ 1/(SNR + 1) · 5), not the plain epsilon loss of an untrained UNet (≈ 1).
  EXPECT_LT(steps.front().loss, 0.5);
}

TEST(FinetuneObjectives, HyMotionRefusesDiffusionOptionsNamingTheKey) {
  const TempDir work("ft_objectives_hy");
  const fs::path w = work.path();
  write_objective_file(w / "run.toml", "[model]\nname = \"hymotion_tiny\"\n[data]\ndir = \"data\"\n[train]\n"
                                       "run_dir = \"run\"\n[loss]\nsnr_gamma = 5.0\n");
  const auto train = run_in(w, zest_binary() + " train run.toml");
  EXPECT_EQ(train.status, 1) << train.output;
  EXPECT_NE(train.output.find("run.toml: loss.snr_gamma is a diffusion (UNet) option; HY-Motion trains a flow-matching"),
            std::string::npos)
      << train.output;
}

}  // namespace
}  // namespace zest::testing
