// `zest bench` on the CPU (the GPU runs are in bench/RESULTS.md): one JSON line with the figures the
// issue asks for, FLOPs counted as the anchors count them, and every bench run file parses.
#include "cli_test_util.h"

#include "common/temp_dir.h"
#include "profiling/flop_counter.h"
#include "train/run_config.h"

#include <ATen/record_function.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace zest::testing {
namespace {

TEST(Bench, TinyHyMotionOnTheCpuPrintsOneJsonLine) {
  const std::string config = std::string(ZEST_SOURCE_DIR) + "/bench/configs/hymotion_tiny.toml";
  // lr 1e-2 (the run file leaves the default 1e-4): 26 steps then move the loss well past its noise.
  const CliResult r = run_cli({zest_binary(), "bench", config, "--steps", "10", "--warmup", "5", "--set",
                               "optimizer.lr=1e-2"},
                              {120.0});
  ASSERT_TRUE(r.exited() && r.code() == 0) << r.describe();
  const auto j = nlohmann::json::parse(r.out);
  for (const char* key : {"step_ms", "samples_per_s", "tflops", "mfu", "peak_allocated_gib", "peak_reserved_gib",
                          "model_state_bytes", "model_state_formula_bytes", "comm_exposed_ms", "flops_per_step",
                          "pipelined_step_ms", "pipelined_samples_per_s", "loss_first", "loss_last",
                          "activation_bytes_per_sample", "kernel_launches_per_step", "graph_pool_gib",
                          "eager_cache_gib"}) {
    EXPECT_TRUE(j.contains(key)) << key << " missing in " << r.out;
  }
  EXPECT_EQ(j["model"], "hymotion_tiny");
  EXPECT_LE(j["step_ms"]["min"].get<double>(), j["step_ms"]["median"].get<double>());
  EXPECT_LE(j["step_ms"]["median"].get<double>(), j["step_ms"]["max"].get<double>());
  EXPECT_GT(j["flops_per_step"].get<double>(), 0.0);
  EXPECT_GT(j["pipelined_step_ms"].get<double>(), 0.0);
  // It trains: 26 steps on the two synthetic batches bring the loss down (2.17 → 1.60 when written).
  EXPECT_GT(j["loss_first"].get<double>(), 0.0);
  EXPECT_LT(j["loss_last"].get<double>(), j["loss_first"].get<double>());
  EXPECT_TRUE(j["kernel_launches_per_step"].is_null()) << "launches are counted on GPUs only";
  EXPECT_EQ(j["graph_pool_gib"].get<double>(), 0.0) << "no CUDA graphs on the CPU";
  EXPECT_TRUE(j["profile"].is_null()) << "no kernel table without --profile";
  // The engine's model state is the formula's plus padding only.
  const double ratio = j["model_state_bytes"].get<double>() / j["model_state_formula_bytes"].get<double>();
  EXPECT_NEAR(ratio, 1.0, 1e-3);
}

// --loss-curve: every step's loss in the JSON line (the FLOP-counting step, warm-up, timed and pipelined
// steps), its first and last entries the loss_first and loss_last of the line; [train] seed chooses the
// synthetic batches and noise, the same seed the same curve; "matmul" says the products' precision.
TEST(Bench, LossCurveHasEveryStepAndFollowsTheSeed) {
  const std::string config = std::string(ZEST_SOURCE_DIR) + "/bench/configs/hymotion_tiny.toml";
  auto curve_of = [&](const std::string& seed) {
    const CliResult r = run_cli({zest_binary(), "bench", config, "--steps", "3", "--warmup", "1", "--loss-curve",
                                 "--set", "train.seed=" + seed},
                                {120.0});
    EXPECT_TRUE(r.exited() && r.code() == 0) << r.describe();
    return nlohmann::json::parse(r.out);
  };
  const auto j = curve_of("0");
  ASSERT_TRUE(j["loss_curve"].is_array()) << j.dump();
  const auto curve = j["loss_curve"].get<std::vector<double>>();
  ASSERT_EQ(curve.size(), 1u + 1u + 3u + 3u);
  EXPECT_DOUBLE_EQ(curve.front(), j["loss_first"].get<double>());
  EXPECT_DOUBLE_EQ(curve.back(), j["loss_last"].get<double>());
  EXPECT_EQ(j["matmul"], "bf16");
  EXPECT_EQ(curve_of("0")["loss_curve"].get<std::vector<double>>(), curve) << "the same seed, the same curve";
  EXPECT_NE(curve_of("3")["loss_curve"].get<std::vector<double>>(), curve) << "another seed, other batches";
}

// [engine.kernels] reaches the JSON ("kernels": the switches in force), and a set environment variable wins
// over the run file with one line on stderr saying what it changed.
TEST(Bench, KernelSwitchesAreInTheJson) {
  const std::string config = std::string(ZEST_SOURCE_DIR) + "/bench/configs/hymotion_tiny.toml";
  ::setenv("ZEST_QK_NORM_ROPE", "0", 1);  // inherited by the child only for this run
  const CliResult r = run_cli({zest_binary(), "bench", config, "--steps", "1", "--warmup", "0", "--set",
                               "engine.kernels.split_linear=false"},
                              {120.0});
  ::unsetenv("ZEST_QK_NORM_ROPE");
  ASSERT_TRUE(r.exited() && r.code() == 0) << r.describe();
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_TRUE(j.contains("kernels")) << r.out;
  const auto& kernels = j["kernels"];
  EXPECT_EQ(kernels["split_linear"], false) << r.out;
  EXPECT_EQ(kernels["qk_norm_rope"], false) << r.out;
  EXPECT_EQ(kernels["linear_grad_fusion"], true) << r.out;
  EXPECT_EQ(kernels["conv_grad_fusion"], false) << r.out;
  EXPECT_EQ(kernels["sdpa_backend"], "auto") << r.out;
  EXPECT_NE(r.err.find("zest: ZEST_QK_NORM_ROPE=0 overrides [engine.kernels] qk_norm_rope = true"), std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("split_linear"), std::string::npos) << "no variable overrides it:\n" << r.err;
}

// [lora] in a bench run file trains only the adapters, as `zest train` does: the engine holds the adapters,
// the base is frozen beside it, and the adapters learn.
TEST(Bench, LoraRunTrainsOnlyTheAdapters) {
  const std::string config = std::string(ZEST_SOURCE_DIR) + "/bench/configs/hymotion_tiny.toml";
  const CliResult full = run_cli({zest_binary(), "bench", config, "--steps", "1", "--warmup", "0"}, {120.0});
  ASSERT_TRUE(full.exited() && full.code() == 0) << full.describe();
  const CliResult r = run_cli({zest_binary(), "bench", config, "--steps", "10", "--warmup", "5", "--set",
                               "lora.enabled=true", "--set", "lora.rank=2", "--set", "optimizer.lr=1e-2"},
                              {120.0});
  ASSERT_TRUE(r.exited() && r.code() == 0) << r.describe();
  const auto whole = nlohmann::json::parse(full.out);
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(whole["frozen_parameters"].get<int64_t>(), 0);
  const int64_t adapters = j["parameters"].get<int64_t>();
  const int64_t frozen = j["frozen_parameters"].get<int64_t>();
  EXPECT_GT(adapters, 0);
  EXPECT_LT(adapters, whole["parameters"].get<int64_t>() / 10) << "the engine holds more than the adapters";
  EXPECT_EQ(frozen, whole["parameters"].get<int64_t>()) << "the base, frozen, is the whole model";
  EXPECT_LT(j["loss_last"].get<double>(), j["loss_first"].get<double>());
}

// --profile on the CPU traces the host phases of the profiled steps (profiling/step_trace.h): one Chrome
// trace named as torch's tensorboard_trace_handler names it, no kernel tables (those need a GPU).
TEST(Bench, ProfileOnTheCpuWritesAHostTrace) {
  const TempDir dir;
  const std::string config = std::string(ZEST_SOURCE_DIR) + "/bench/configs/hymotion_tiny.toml";
  const std::string profile = dir.path() + "/profile";
  const CliResult r = run_cli({zest_binary(), "bench", config, "--steps", "1", "--warmup", "0", "--profile", profile},
                              {120.0});
  ASSERT_TRUE(r.exited() && r.code() == 0) << r.describe();
  const auto j = nlohmann::json::parse(r.out);
  const std::string trace = j.at("trace").get<std::string>();
  EXPECT_EQ(std::filesystem::path(trace).parent_path(), std::filesystem::path(profile));
  EXPECT_NE(trace.find(".pt.trace.json"), std::string::npos) << trace;
  std::ifstream in(trace);
  const auto events = nlohmann::json::parse(in).at("traceEvents");
  int steps = 0;
  for (const auto& e : events) steps += e.at("name").get<std::string>().rfind("ProfilerStep#", 0) == 0;
  EXPECT_EQ(steps, 2) << "--profile-steps defaults to 2";
  EXPECT_FALSE(std::filesystem::exists(profile + "/kernels_rank0.tsv"));
}

// Forward + backward of a Linear: 2·B·in·out for the forward, twice that for the two backward products.
TEST(Bench, FlopsAreCountedAsTheAnchorsCountThem) {
  auto linear = torch::nn::Linear(7, 13);
  const auto x = torch::randn({4, 7}, torch::requires_grad());
  int64_t flops = 0;
  {
    const FlopCounter counter;
    linear->forward(x).sum().backward();
    flops = counter.flops();
  }
  EXPECT_EQ(flops, 3 * 2 * 4 * 7 * 13);
  // A 3×3 convolution: 2 · output elements · Cin · 9, forward and both backward products.
  auto conv = torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 5, 3).padding(1));
  const auto image = torch::randn({2, 3, 6, 6}, torch::requires_grad());
  {
    const FlopCounter counter;
    conv->forward(image).sum().backward();
    flops = counter.flops();
  }
  EXPECT_EQ(flops, 3 * 2 * (2 * 5 * 6 * 6) * 3 * 9);
  // zest's own products, recorded under their names (the accumulating and epilogue products on CUDA), count
  // as A [4, 7] · B [7, 13].
  const auto a = torch::randn({4, 7}), b = torch::randn({7, 13});
  for (const char* name : {"zest::mm_accumulate", "zest::mm_epilogue"}) {
    const FlopCounter counter;
    { RECORD_FUNCTION(name, std::vector<c10::IValue>({a, b})); }
    EXPECT_EQ(counter.flops(), 2 * 4 * 7 * 13) << name;
  }
}

TEST(Bench, EveryBenchRunFileParses) {
  int parsed = 0;
  for (const auto& entry : std::filesystem::directory_iterator(std::string(ZEST_SOURCE_DIR) + "/bench/configs")) {
    if (entry.path().extension() != ".toml") continue;
    // The model too, named by a path relative to the working directory as on a command line: a
    // model.config relative to the run file must be found once, not joined to the run file's folder twice.
    const std::string relative = std::filesystem::relative(entry.path()).string();
    EXPECT_NO_THROW(resolve_model(parse_run_config(relative).model)) << relative;
    ++parsed;
  }
  EXPECT_GE(parsed, 5);
}

}  // namespace
}  // namespace zest::testing
