// `zest train` end to end through the CLI on 2 ranks (zest launch): the loss falls, checkpoints and the
// merged model are written, and a run stopped by SIGTERM mid-way and resumed ends with parameters
// identical to an uninterrupted run.
#include "formats/safetensors.h"
#include "common/temp_dir.h"
#include "launch_test_util.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

namespace zest::testing {
namespace {

namespace fs = std::filesystem;

void write_run_file(const fs::path& path, const std::string& model, const fs::path& data, int max_steps) {
  std::ofstream(path) << "[model]\nname = \"" << model << "\"\n"
                      << "[data]\ndir = \"" << data.string() << "\"\nbatch_size = 2\nseq_len = 12\nnum_workers = 1\n"
                      << "[engine]\nstage = 2\nprecision = \"fp32\"\naccumulation_steps = 2\nclip_norm = 1.0\n"
                      << "[optimizer]\nlr = 3e-3\n"
                      << "[scheduler]\nname = \"cosine\"\nwarmup_steps = 2\n"
                      << "[train]\nmax_steps = " << max_steps << "\nlog_every = 1\nseed = 5\n"
                      << "[checkpoint]\nevery_steps = 4\nkeep_last = 2\n";
}

std::vector<double> losses(const fs::path& metrics) {
  std::vector<double> out;
  std::ifstream in(metrics);
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line).at("loss").get<double>());
  return out;
}

void expect_same_weights(const fs::path& a, const fs::path& b) {
  const auto ta = safetensors::load_file(a.string()), tb = safetensors::load_file(b.string());
  ASSERT_EQ(ta.size(), tb.size());
  ASSERT_GT(ta.size(), 100u);
  for (size_t i = 0; i < ta.size(); ++i) {
    ASSERT_EQ(ta[i].first, tb[i].first);
    EXPECT_TRUE(ta[i].second.equal(tb[i].second)) << ta[i].first << " differs after stop + resume";
  }
}

void run_ok(const std::vector<std::string>& argv) {
  Child child(argv);
  const int status = child.finish();
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << child.output();
}

class TrainEndToEnd : public ::testing::TestWithParam<std::string> {};

TEST_P(TrainEndToEnd, LossFallsAndStopResumeIsExact) {
  const std::string model = GetParam();
  const TempDir workdir("e2e_" + model);
  const fs::path work = workdir.path();
  const fs::path data = work / "data", run = work / "run.toml";
  run_ok({zest_binary(), "data", "synth", "--model", model, "--out", data.string(), "--samples", "48"});
  constexpr int kSteps = 14;
  write_run_file(run, model, data, kSteps);

  // Uninterrupted.
  const fs::path full = work / "full";
  run_ok({zest_binary(), "launch", "-n", "2", "--", zest_binary(), "train", run.string(), "--set",
          "train.run_dir=\"" + full.string() + "\""});
  const auto curve = losses(full / "metrics.jsonl");
  ASSERT_EQ(curve.size(), static_cast<size_t>(kSteps));
  const double first = (curve[0] + curve[1] + curve[2]) / 3, last = (curve[11] + curve[12] + curve[13]) / 3;
  EXPECT_LT(last, first) << "loss did not fall: " << first << " → " << last;
  EXPECT_TRUE(fs::exists(full / "checkpoints" / "latest"));
  EXPECT_TRUE(fs::exists(full / "checkpoints" / "step_00000014" / "manifest.json"));
  EXPECT_TRUE(fs::exists(full / "model.safetensors"));

  // Stopped by SIGTERM after step 5, then resumed by the same command.
  const fs::path split = work / "split";
  const std::vector<std::string> argv = {zest_binary(), "launch", "-n", "2", "--", zest_binary(), "train",
                                         run.string(), "--set", "train.run_dir=\"" + split.string() + "\""};
  {
    Child child(argv);
    ASSERT_TRUE(child.read_until("step 5/")) << child.output();
    ::kill(child.pid(), SIGTERM);
    const int status = child.finish();
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << child.output();
    EXPECT_NE(child.output().find("stop signal received"), std::string::npos) << child.output();
  }
  EXPECT_FALSE(fs::exists(split / "model.safetensors"));  // preempted: no merge yet
  run_ok(argv);
  expect_same_weights(full / "model.safetensors", split / "model.safetensors");
}

INSTANTIATE_TEST_SUITE_P(TinyModels, TrainEndToEnd, ::testing::Values("hymotion_tiny", "unet_tiny"));

}  // namespace
}  // namespace zest::testing
