// `zest train` on 2 ranks (zest launch) for both tiny models, in every precision the CPU runs (fp32,
// bf16) at every stage (0, 1, 2, 3): each run finishes with finite losses and no skipped step, the stages
// agree with each other, and bf16 tracks the fp32 run step by step within a stated tolerance.
#include "common/temp_dir.h"
#include "zest_run.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <map>
#include <string>
#include <vector>

namespace zest::testing {
namespace {

namespace fs = std::filesystem;

constexpr int kSteps = 6;
// The fp32 stages reduce the same numbers in a different order (allreduce vs reduce-scatter): their
// losses agree to float32 rounding.
constexpr double kStageTolFp32 = 1e-5;
// bf16 against fp32, relative, at every step. Step 1 differs only by the bf16 forward (the same
// weights, rounded); later steps add the drift of bf16 gradients through AdamW. Measured over 6 steps
// and 3 stages: 3.5e-4 (HY-Motion), 8.1e-4 (UNet).
constexpr double kBf16Tol = 5e-3;

void write_run_file(const fs::path& path, const std::string& model) {
  std::ofstream(path) << "[model]\nname = \"" << model << "\"\n"
                      << "[data]\ndir = \"data\"\nbatch_size = 2\nseq_len = 12\nnum_workers = 1\n"
                      << "[engine]\naccumulation_steps = 2\nclip_norm = 1.0\n"
                      << "[optimizer]\nlr = 3e-3\n"
                      << "[scheduler]\nname = \"cosine\"\nwarmup_steps = 2\n"
                      << "[train]\nmax_steps = " << kSteps << "\nlog_every = 1\nseed = 3\n"
                      << "[checkpoint]\nevery_steps = 0\nmerge_at_end = false\n";
}

// Losses of one run, step by step.
std::vector<double> train(const fs::path& dir, const std::string& precision, int stage) {
  const std::string run_dir = "run_" + precision + "_stage" + std::to_string(stage);
  const auto r = run_in(dir, zest_binary() + " launch -n 2 -- " + zest_binary() + " train run.toml --set " +
                                 "'engine.precision=\"" + precision + "\"' --set engine.stage=" +
                                 std::to_string(stage) + " --set 'train.run_dir=\"" + run_dir + "\"'");
  EXPECT_EQ(r.status, 0) << r.output;
  std::vector<double> losses;
  const auto steps = logged_steps(dir / run_dir / "metrics.jsonl");
  for (const LoggedStep& s : steps) {
    EXPECT_TRUE(std::isfinite(s.loss)) << precision << " stage " << stage << " step " << s.step;
    EXPECT_EQ(s.skipped_total, 0) << precision << " stage " << stage << " step " << s.step;
    losses.push_back(s.loss);
  }
  EXPECT_EQ(losses.size(), static_cast<size_t>(kSteps)) << r.output;
  return losses;
}

class TrainPrecision : public ::testing::TestWithParam<std::string> {};

TEST_P(TrainPrecision, EveryStageAndPrecisionOnTwoRanks) {
  const std::string model = GetParam();
  const TempDir work("precision_" + model);
  const fs::path dir = work.path();
  const auto synth = run_in(dir, zest_binary() + " data synth --model " + model + " --out data --samples 32");
  ASSERT_EQ(synth.status, 0) << synth.output;
  write_run_file(dir / "run.toml", model);

  std::map<std::string, std::vector<std::vector<double>>> runs;  // precision → stage → losses
  for (const std::string precision : {"fp32", "bf16"}) {
    for (int stage = 0; stage <= 3; ++stage) runs[precision].push_back(train(dir, precision, stage));
  }
  if (HasFailure()) return;

  const auto& fp32 = runs.at("fp32");
  double worst = 0.0;
  for (int stage = 0; stage <= 3; ++stage) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    for (int i = 0; i < kSteps; ++i) {
      EXPECT_NEAR(fp32[stage][i], fp32[0][i], kStageTolFp32 * fp32[0][i]) << "fp32 step " << i + 1;
      EXPECT_NEAR(runs.at("bf16")[stage][i], fp32[stage][i], kBf16Tol * fp32[stage][i]) << "bf16 step " << i + 1;
      worst = std::max(worst, std::abs(runs.at("bf16")[stage][i] / fp32[stage][i] - 1));
    }
    // bf16 is not fp32 in disguise: the runs differ (a bf16 run silently computing in fp32 would not).
    EXPECT_NE(runs.at("bf16")[stage][0], fp32[stage][0]);
  }
  std::cout << "[train precision] " << model << ": worst |bf16 − fp32| / fp32 over " << kSteps
            << " steps and 4 stages = " << worst << "\n";
  // It learns: over the run the loss falls in both precisions (fp32 curves are equal across stages).
  for (const std::string precision : {"fp32", "bf16"}) {
    const auto& curve = runs.at(precision)[2];
    EXPECT_LT(curve[kSteps - 1] + curve[kSteps - 2], curve[0] + curve[1]) << precision;
  }
}

INSTANTIATE_TEST_SUITE_P(TinyModels, TrainPrecision, ::testing::Values("hymotion_tiny", "unet_tiny"));

}  // namespace
}  // namespace zest::testing
