// `zest sample` with a HY-Motion release folder (cli/cmd_sample.cpp, pipelines/motion_pipeline.h): the CLI's
// motion equal to the released pipeline's sampler run in process (the release's null features for guidance,
// its mean/std to denormalise), weights from a file, skeleton animations for the released width, and bad
// input as one clear message with nothing written.
#include "cli_test_util.h"
#include "tests/finetune/finetune_test_util.h"

#include "formats/npy.h"
#include "formats/safetensors.h"
#include "models/hymotion/flow_matching.h"
#include "models/hymotion/hymotion_model.h"
#include "models/state_dict.h"
#include "pipelines/motion_gif.h"
#include "pipelines/motion_pipeline.h"

#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <fstream>

namespace zest::testing {
namespace {

namespace fs = std::filesystem;

fs::path motion_scratch(const std::string& name) {
  const fs::path dir = fs::path(::testing::TempDir()) / "zest_sample_motion" / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

CliResult sample_motion(const std::vector<std::string>& extra) {
  std::vector<std::string> argv{zest_binary(), "sample"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return run_cli(argv);
}

torch::Generator generator(uint64_t seed) { return at::make_generator<at::CPUGeneratorImpl>(seed); }

// Three samples of hymotion_tiny's text widths (24 per token, 16 pooled) in one shard; sample 1 has 4 valid tokens.
struct Texts {
  torch::Tensor ctxt, mask, vtxt;
};
Texts write_text_shard(const fs::path& path) {
  auto gen = generator(5);
  Texts t{torch::randn({3, 6, 24}, gen), torch::ones({3, 6}, torch::kBool), torch::randn({3, 16}, gen)};
  t.mask.index_put_({1, torch::indexing::Slice(4)}, false);
  safetensors::save_file(path.string(), {{"text_tokens", t.ctxt}, {"text_mask", t.mask}, {"text_pooled", t.vtxt}});
  return t;
}

// The released pipeline's sampling of text sample `i` with `network` values: Euler steps from CPU noise of
// `seed`, guidance with the release's null features, the output denormalised with its mean/std.
torch::Tensor reference_motion(const Named& network, const Named& pipeline, const Texts& text, int64_t i,
                               int64_t count, int64_t frames, int64_t steps, double scale, uint64_t seed) {
  auto module = build_model(builtin("hymotion_tiny"));
  auto& model = dynamic_cast<hymotion::HyMotionModel&>(*module);
  {
    torch::NoGradGuard no_grad;
    for (auto& item : model.named_parameters()) item.value().copy_(network.at(item.key()));
  }
  model.eval();
  hymotion::Guidance guidance;
  guidance.scale = scale;
  guidance.null_vtxt = pipeline.at("null_vtxt_feat");
  guidance.null_ctxt = pipeline.at("null_ctxt_input");
  const auto noise = torch::randn({count, frames, 12}, generator(seed));
  const auto x = hymotion::sample_euler(model, noise, text.ctxt[i].expand({count, 6, 24}),
                                        text.vtxt[i].view({1, 1, 16}).expand({count, 1, 16}),
                                        torch::ones({count, frames}, torch::kBool), text.mask[i].expand({count, 6}), steps,
                                        guidance);
  return x * pipeline.at("std") + pipeline.at("mean");
}

TEST(MotionSample, TheCliDrawsWhatTheReleasedPipelineDraws) {
  const fs::path dir = motion_scratch("release");
  const auto [network, pipeline] = write_hymotion_release((dir / "release").string());
  const Texts text = write_text_shard(dir / "text.safetensors");
  const fs::path out = dir / "out" / "motion.npy";
  const auto r = sample_motion({"--pretrained", (dir / "release").string(), "--text", (dir / "text.safetensors").string(),
                         "--sample", "1", "--frames", "10", "--steps", "4", "--seed", "3", "-n", "2", "-o", out.string()});
  ASSERT_EQ(r.code(), 0) << r.describe();
  // The release's config.yml says text_guidance_scale 5: that is the default.
  EXPECT_NE(r.out.find("2 motions of 10 frames, 4 Euler steps, guidance 5, seed 3"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("no skeleton animation: the motion has 12 features per frame, not the 201"), std::string::npos)
      << r.out;
  const auto motion = npy::read(out.string());
  ASSERT_EQ(motion.sizes(), (std::vector<int64_t>{2, 10, 12}));
  const auto expected = reference_motion(network, pipeline, text, 1, 2, 10, 4, 5.0, 3);
  EXPECT_TRUE(torch::allclose(motion, expected, 1e-4, 1e-5)) << "max diff " << (motion - expected).abs().max().item<double>();
  EXPECT_FALSE(motion[0].equal(motion[1]));  // other noise per sample
  EXPECT_FALSE(fs::exists(out.string() + ".tmp"));
}

TEST(MotionSample, WeightsFromAFileAndAnotherGuidance) {
  const fs::path dir = motion_scratch("weights");
  const auto [network, pipeline] = write_hymotion_release((dir / "release").string());
  const Texts text = write_text_shard(dir / "text.safetensors");
  // Trained values: the release's, shifted, under the network's own names (what `zest merge` writes).
  Named trained;
  safetensors::NamedTensors stored;
  for (const auto& [name, value] : network) {
    trained[name] = value + 0.01;
    stored.emplace_back(name, trained[name]);
  }
  safetensors::save_file((dir / "model.safetensors").string(), stored);
  const fs::path out = dir / "motion.npy";
  const auto r = sample_motion({"--pretrained", (dir / "release").string(), "--weights", (dir / "model.safetensors").string(),
                         "--text", (dir / "text.safetensors").string(), "--sample", "2", "--frames", "6", "--steps", "3",
                         "--guidance", "1", "-o", out.string()});
  ASSERT_EQ(r.code(), 0) << r.describe();
  const auto motion = npy::read(out.string());
  const auto expected = reference_motion(trained, pipeline, text, 2, 1, 6, 3, 1.0, 0);
  EXPECT_TRUE(torch::allclose(motion, expected, 1e-4, 1e-5)) << "max diff " << (motion - expected).abs().max().item<double>();
  const auto released = reference_motion(network, pipeline, text, 2, 1, 6, 3, 1.0, 0);
  EXPECT_FALSE(torch::allclose(motion, released, 1e-4, 1e-5));
}

TEST(MotionSample, SkeletonAnimationsForTheReleasedWidth) {
  const fs::path dir = motion_scratch("animations");
  // Joint positions (features 135..200) of a person-sized figure moving a little: any finite values draw.
  const auto several = torch::randn({2, 8, kMotionFeatures}, generator(1)) * 0.3;
  const auto written = write_motion_animations((dir / "walk").string(), several);
  ASSERT_EQ(written, (std::vector<std::string>{(dir / "walk_0.gif").string(), (dir / "walk_1.gif").string()}));
  for (const std::string& gif : written) {
    std::ifstream in(gif, std::ios::binary);
    std::string magic(6, '\0');
    in.read(magic.data(), 6);
    EXPECT_EQ(magic, "GIF89a") << gif;
  }
  EXPECT_EQ(write_motion_animations((dir / "one").string(), several.narrow(0, 0, 1)),
            std::vector<std::string>{(dir / "one.gif").string()});
  EXPECT_TRUE(write_motion_animations((dir / "tiny").string(), torch::zeros({1, 8, 12})).empty());
  EXPECT_FALSE(fs::exists(dir / "tiny.gif"));
}

TEST(MotionSample, BadInputIsOneClearMessage) {
  const fs::path dir = motion_scratch("bad");
  write_hymotion_release((dir / "release").string());
  write_text_shard(dir / "text.safetensors");
  const std::string release = (dir / "release").string(), text = (dir / "text.safetensors").string();
  const std::string out = (dir / "motion.npy").string();
  auto expect_error = [&](const std::vector<std::string>& argv, const std::string& part, const std::string& output) {
    const auto r = sample_motion(argv);
    EXPECT_EQ(r.code(), 1) << r.describe();
    EXPECT_EQ(one_clear_error_line(r.err), "") << r.err;
    EXPECT_NE(r.err.find(part), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(output)) << "an output was written despite the error";
  };
  expect_error({"--pretrained", release, "--prompt", "a person walks", "-o", out},
               "HY-Motion's text encoders were not found: no folder holding Qwen3-8B/ and clip-vit-large-patch14/", out);
  expect_error({"--pretrained", release, "--random-text", "--negative-prompt", "x", "-o", out},
               "whose guidance steers away from its learned null text features", out);
  expect_error({"--pretrained", release, "-o", out},
               "give one of --prompt TEXT, --text DATASET|SHARD (cached text features) or --random-text", out);
  expect_error({"--pretrained", release, "--random-text", "-o", (dir / "motion.png").string()}, "must end in .npy",
               (dir / "motion.png").string());
  expect_error({"--pretrained", release, "--text", text, "--sample", "3", "-o", out}, "sample 3 is out of range", out);
  expect_error({"--pretrained", release, "--random-text", "--frames", "0", "-o", out},
               "--frames must be between 1 and 100000, got 0", out);
  expect_error({"--pretrained", release, "--random-text", "--ema", "-o", out}, "--ema needs --checkpoint", out);
}

}  // namespace
}  // namespace zest::testing
