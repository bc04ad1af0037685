// The built example programs, run as a user would: infer_unet / infer_hymotion load a tiny model's merged
// weights and write samples equal to sampling in-process; custom_loop trains (its loss falls).
#include "formats/safetensors.h"
#include "data/dataset_manifest.h"
#include "formats/npy.h"
#include "models/hymotion/hymotion.h"
#include "models/model_resolve.h"
#include "models/state_dict.h"
#include "models/unet/unet.h"

#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <regex>
#include <string>
#include <vector>

namespace zest {
namespace {

namespace fs = std::filesystem;

struct RunResult {
  int status = -1;
  std::string output;  // stdout and stderr
};

RunResult run(const std::string& command) {
  RunResult result;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return result;
  char buffer[4096];
  while (const size_t n = std::fread(buffer, 1, sizeof(buffer), pipe)) result.output.append(buffer, n);
  const int status = ::pclose(pipe);
  result.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

std::string binary(const std::string& name) { return std::string(ZEST_BINARY_DIR) + "/" + name; }

torch::Generator generator(uint64_t seed) { return at::make_generator<at::CPUGeneratorImpl>(seed); }

class ExampleRun : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("zest_examples_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // A built-in tiny model with seeded random weights, saved as a merged state dict.
  template <typename Model>
  std::shared_ptr<Model> save_tiny(const std::string& name, const std::string& weights) const {
    torch::manual_seed(11);
    ModelSelection selection;
    selection.name = name;
    auto model = std::dynamic_pointer_cast<Model>(build_model(resolve_model(selection)));
    save_state_dict(*model, weights);
    return model;
  }

  fs::path dir_;
};

// ---------------------------------------------------------------------------------------------------
// infer_unet

TEST_F(ExampleRun, InferUnetMatchesInProcessDdim) {
  const auto model = save_tiny<unet::UNet2DConditionModel>("unet_tiny", path("unet.safetensors"));
  // A "shard" of 3 samples' cached conditioning; the example takes sample 1.
  auto gen = generator(5);
  const auto context = torch::randn({3, 5, 12}, gen), pooled = torch::randn({3, 8}, gen);
  const auto time_ids = torch::tensor({64.f, 64.f, 0.f, 0.f, 64.f, 64.f}).repeat({3, 1});
  safetensors::save_file(path("text.safetensors"),
                         {{"text_embeds_seq", context}, {"pooled", pooled}, {"time_ids", time_ids}});

  const std::string command = binary("infer_unet") + " --model unet_tiny --weights " + path("unet.safetensors") +
                              " --text " + path("text.safetensors") +
                              " --sample 1 --num-samples 2 --steps 6 --seed 4 --out ";
  const auto r = run(command + path("latents.npy"));
  ASSERT_EQ(r.status, 0) << r.output;
  ASSERT_TRUE(fs::exists(path("latents.npy"))) << r.output;
  const auto latents = npy::read(path("latents.npy"));
  ASSERT_EQ(latents.sizes(), (std::vector<int64_t>{2, 4, 8, 8}));

  unet::UNetConditioning cond;
  cond.encoder_hidden_states = context[1].expand({2, 5, 12});
  cond.text_embeds = pooled[1].expand({2, 8});
  cond.time_ids = time_ids[1].expand({2, 6});
  const auto noise = torch::randn({2, 4, 8, 8}, generator(4));
  unet::DdimOptions options;
  options.steps = 6;
  const auto expected = unet::sample_ddim(*model, noise, cond, options);
  EXPECT_TRUE(torch::allclose(latents, expected, 1e-4, 1e-5))
      << "max diff " << (latents - expected).abs().max().item<double>();
  EXPECT_FALSE(latents[0].equal(latents[1]));  // different noise per sample

  // The same as safetensors; guidance changes the result.
  const auto guided = run(command + path("guided.safetensors") + " --guidance-scale 4");
  ASSERT_EQ(guided.status, 0) << guided.output;
  const auto stored = safetensors::Reader(path("guided.safetensors")).read("latents");
  EXPECT_EQ(stored.sizes(), latents.sizes());
  EXPECT_FALSE(torch::allclose(stored, latents, 1e-3, 1e-3));
}

TEST_F(ExampleRun, InferUnetRefusesWeightsOfAnotherShape) {
  save_tiny<unet::UNet2DConditionModel>("unet_tiny", path("unet.safetensors"));
  auto tensors = safetensors::load_file(path("unet.safetensors"));
  const std::string dropped = tensors.back().first;
  tensors.pop_back();
  safetensors::save_file(path("partial.safetensors"), tensors);
  const auto r = run(binary("infer_unet") + " --model unet_tiny --random-text --steps 2 --weights " +
                     path("partial.safetensors") + " --out " + path("x.npy"));
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find(dropped), std::string::npos) << r.output;  // strict load names the missing tensor
  EXPECT_FALSE(fs::exists(path("x.npy")));
}

// ---------------------------------------------------------------------------------------------------
// infer_hymotion

TEST_F(ExampleRun, InferHymotionMatchesInProcessEuler) {
  const auto model = save_tiny<hymotion::HyMotionModel>("hymotion_tiny", path("hy.safetensors"));
  auto gen = generator(6);
  const auto ctxt = torch::randn({2, 6, 24}, gen), vtxt = torch::randn({2, 16}, gen);
  auto ctxt_mask = torch::ones({2, 6}, torch::kBool);
  ctxt_mask.index_put_({1, torch::indexing::Slice(4)}, false);  // sample 1 has 4 valid tokens
  safetensors::save_file(path("text.safetensors"),
                         {{"text_tokens", ctxt}, {"text_mask", ctxt_mask}, {"text_pooled", vtxt}});

  const auto r = run(binary("infer_hymotion") + " --model hymotion_tiny --weights " + path("hy.safetensors") +
                     " --text " + path("text.safetensors") +
                     " --sample 1 --frames 10 --steps 5 --seed 9 --num-samples 2 --out " + path("motion.npy"));
  ASSERT_EQ(r.status, 0) << r.output;
  const auto motion = npy::read(path("motion.npy"));
  ASSERT_EQ(motion.sizes(), (std::vector<int64_t>{2, 10, 12}));
  // 12 features hold no joint positions: no skeleton animation, said once.
  EXPECT_NE(r.output.find("no skeleton animation: the motion has 12 features per frame, not the 201"),
            std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(path("motion_0.gif")));

  const auto noise = torch::randn({2, 10, 12}, generator(9));
  const auto expected = hymotion::sample_euler(*model, noise, ctxt[1].expand({2, 6, 24}),
                                               vtxt[1].view({1, 1, 16}).expand({2, 1, 16}),
                                               torch::ones({2, 10}, torch::kBool), ctxt_mask[1].expand({2, 6}), 5);
  EXPECT_TRUE(torch::allclose(motion, expected, 1e-4, 1e-5))
      << "max diff " << (motion - expected).abs().max().item<double>();
}

// --text DATASET_DIR: a global sample index across shards, and the output denormalised with the
// dataset's statistics.
TEST_F(ExampleRun, InferHymotionReadsADatasetFolder) {
  const auto model = save_tiny<hymotion::HyMotionModel>("hymotion_tiny", path("hy.safetensors"));
  auto gen = generator(8);
  const auto ctxt = torch::randn({5, 6, 24}, gen), vtxt = torch::randn({5, 16}, gen);
  const auto mask = torch::ones({5, 6}, torch::kBool);
  const auto mean = torch::randn({12}, gen), std = torch::rand({12}, gen) + 0.5;
  const fs::path data = dir_ / "dataset";
  fs::create_directories(data);
  // Two shards of 2 and 3 samples; global sample 3 is shard 1's sample 1. Motion tensors are not read.
  safetensors::save_file((data / "shard-0.safetensors").string(),
                         {{"text_tokens", ctxt.narrow(0, 0, 2)}, {"text_mask", mask.narrow(0, 0, 2)},
                          {"text_pooled", vtxt.narrow(0, 0, 2)}});
  safetensors::save_file((data / "shard-1.safetensors").string(),
                         {{"text_tokens", ctxt.narrow(0, 2, 3)}, {"text_mask", mask.narrow(0, 2, 3)},
                          {"text_pooled", vtxt.narrow(0, 2, 3)}});
  safetensors::save_file((data / "stats.safetensors").string(), {{"mean", mean}, {"std", std}});
  DatasetManifest manifest;
  manifest.format = DatasetFormat::motion;
  manifest.shards = {{"shard-0.safetensors", 2}, {"shard-1.safetensors", 3}};
  manifest.features = {{"motion_dim", 12}, {"text_tokens", 6}, {"text_dim", 24}, {"pooled_dim", 16}};
  manifest.stats_file = "stats.safetensors";
  write_manifest(data.string(), manifest);

  const auto r = run(binary("infer_hymotion") + " --model hymotion_tiny --weights " + path("hy.safetensors") +
                     " --text " + data.string() + " --sample 3 --frames 6 --steps 3 --seed 2 --out " +
                     path("motion.npy"));
  ASSERT_EQ(r.status, 0) << r.output;
  const auto motion = npy::read(path("motion.npy"));
  const auto noise = torch::randn({1, 6, 12}, generator(2));
  const auto normalised = hymotion::sample_euler(*model, noise, ctxt[3].unsqueeze(0), vtxt[3].view({1, 1, 16}),
                                                 torch::ones({1, 6}, torch::kBool), mask[3].unsqueeze(0), 3);
  const auto expected = normalised * std + mean;
  EXPECT_TRUE(torch::allclose(motion, expected, 1e-4, 1e-5))
      << "max diff " << (motion - expected).abs().max().item<double>();
  // Sample 5 does not exist: the error names the dataset and its size.
  const auto bad = run(binary("infer_hymotion") + " --model hymotion_tiny --weights " + path("hy.safetensors") +
                       " --text " + data.string() + " --sample 5 --frames 6 --steps 1 --out " + path("bad.npy"));
  EXPECT_NE(bad.status, 0);
  EXPECT_NE(bad.output.find("out of range (the dataset holds 5)"), std::string::npos) << bad.output;
}

TEST_F(ExampleRun, InferHymotionWithRandomTextAndGuidance) {
  save_tiny<hymotion::HyMotionModel>("hymotion_tiny", path("hy.safetensors"));
  safetensors::save_file(path("null.safetensors"), {{"null_vtxt_feat", torch::randn({1, 1, 16})},
                                                    {"null_ctxt_input", torch::randn({1, 1, 24})}});
  const auto r = run(binary("infer_hymotion") + " --model hymotion_tiny --weights " + path("hy.safetensors") +
                     " --random-text --frames 7 --steps 3 --guidance-scale 5 --null-features " +
                     path("null.safetensors") + " --out " + path("motion.safetensors"));
  ASSERT_EQ(r.status, 0) << r.output;
  const auto motion = safetensors::Reader(path("motion.safetensors")).read("motion");
  EXPECT_EQ(motion.sizes(), (std::vector<int64_t>{1, 7, 12}));
  EXPECT_TRUE(torch::isfinite(motion).all().item<bool>());
}

// ---------------------------------------------------------------------------------------------------
// custom_loop

std::vector<double> logged_losses(const std::string& output) {
  std::vector<double> losses;
  const std::regex line(R"(step +\d+ +loss ([0-9.eE+-]+))");
  for (std::sregex_iterator it(output.begin(), output.end(), line), end; it != end; ++it)
    losses.push_back(std::stod((*it)[1].str()));
  return losses;
}

TEST(CustomLoop, TrainsAndTheLossFalls) {
  const auto r = run(binary("custom_loop") + " --steps 30 --batch 4 --frames 16 --micro-batches 2 --lr 3e-3");
  ASSERT_EQ(r.status, 0) << r.output;
  const auto losses = logged_losses(r.output);
  ASSERT_EQ(losses.size(), 30u) << r.output;
  // Flow matching's loss is noisy and has a floor (the noise is not predictable): compare averages.
  auto mean = [&](size_t begin, size_t n) {
    double sum = 0.0;
    for (size_t i = begin; i < begin + n; ++i) sum += losses[i];
    return sum / static_cast<double>(n);
  };
  EXPECT_LT(mean(25, 5), 0.85 * mean(0, 3)) << r.output;
}

TEST(CustomLoop, RunsOnTwoRanks) {
  if (run("command -v mpirun").status != 0) GTEST_SKIP() << "mpirun not found";
  const auto r = run("OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun -np 2 --oversubscribe "
                     "--bind-to none " + binary("custom_loop") + " --steps 2 --batch 2 --frames 8");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("2 ranks"), std::string::npos) << r.output;
  EXPECT_EQ(logged_losses(r.output).size(), 2u) << r.output;  // rank 0 alone prints
}

// The same program, unchanged, at ZeRO-3 (parameters sharded at rest, gathered per unit) on two ranks.
TEST(CustomLoop, RunsAtStageThreeOnTwoRanks) {
  if (run("command -v mpirun").status != 0) GTEST_SKIP() << "mpirun not found";
  const auto r = run("OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun -np 2 --oversubscribe "
                     "--bind-to none " + binary("custom_loop") + " --steps 3 --batch 2 --frames 8 --stage 3");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("stage 3"), std::string::npos) << r.output;
  EXPECT_EQ(logged_losses(r.output).size(), 3u) << r.output;
}

}  // namespace
}  // namespace zest
