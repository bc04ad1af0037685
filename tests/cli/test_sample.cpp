// `zest sample` (cli/cmd_sample.cpp, pipelines/sd_pipeline.h) on the tiny pipeline folders of
// tests/data/sd_tiny/: a PNG of the requested size (grids for n > 1), the CLI's pixels equal to the
// library's, SDXL's path, the reference pipelines' pixels (golden, made by
// scripts/golden/make_sd_pipeline_golden.py; skipped while absent), and bad input as one clear message.
#include "cli_test_util.h"
#include "common/pixel_difference.h"
#include "common/png_pixels.h"
#include "sd_pipeline_test_util.h"
#include "tensorboard/event_file_reader.h"

#include "formats/safetensors.h"
#include "core/check.h"
#include "data/png_write.h"
#include "pipelines/sd_pipeline.h"

#include <gtest/gtest.h>

#include <fstream>
#include <map>


namespace zest::testing {
namespace {

namespace fs = std::filesystem;

std::string tiny(const std::string& which) { return std::string(ZEST_TEST_DATA) + "/sd_tiny/" + which; }

fs::path scratch(const std::string& name) {
  const fs::path dir = fs::path(::testing::TempDir()) / "zest_sample" / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

CliResult sample(const std::vector<std::string>& extra) {
  std::vector<std::string> argv{zest_binary(), "sample"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return run_cli(argv);
}

// ZEST_REGENERATE_SD_TINY=1 writes the committed folders anew (after a change to the generator).
TEST(SdSample, TheCommittedTinyPipelinesAreWhatTheGeneratorWrites) {
  for (const bool sdxl : {false, true}) {
    if (std::getenv("ZEST_REGENERATE_SD_TINY") != nullptr) zest::test::make_tiny_pipeline(tiny(sdxl ? "sdxl" : "sd15"), sdxl);
    const fs::path made = scratch(sdxl ? "made_sdxl" : "made_sd15");
    zest::test::make_tiny_pipeline(made, sdxl);
    const fs::path committed = tiny(sdxl ? "sdxl" : "sd15");
    for (const auto& entry : fs::recursive_directory_iterator(made)) {
      if (!entry.is_regular_file()) continue;
      const fs::path relative = fs::relative(entry.path(), made);
      ASSERT_TRUE(fs::exists(committed / relative)) << relative;
      EXPECT_EQ(clip::test::read_text(entry.path()), clip::test::read_text(committed / relative)) << relative;
    }
  }
}

TEST(SdSample, WritesAPngOfTheRequestedSizeAndGridsForSeveral) {
  const fs::path out = scratch("size");
  const auto one = sample({"--pretrained", tiny("sd15"), "--prompt", "a red fox in the snow", "--steps", "3",
                           "--size", "20x12", "-o", (out / "one.png").string()});
  ASSERT_EQ(one.code(), 0) << one.describe();
  EXPECT_EQ(png_pixels(out / "one.png").sizes(), (std::vector<int64_t>{12, 20, 3}));
  EXPECT_NE(one.out.find("wrote "), std::string::npos) << one.out;
  const auto three = sample({"--pretrained", tiny("sd15"), "--prompt", "a red fox", "--steps", "2", "--size", "16x16",
                             "-n", "3", "--scheduler", "euler", "-o", (out / "grid.png").string()});
  ASSERT_EQ(three.code(), 0) << three.describe();
  EXPECT_EQ(png_pixels(out / "grid.png").sizes(), (std::vector<int64_t>{32, 32, 3}));  // 2 × 2 cells, one black
  EXPECT_FALSE(fs::exists(out / "grid.png.tmp"));
}

SampleRequest small_request(unet::SchedulerKind kind) {
  SampleRequest r;
  r.prompt = "a watercolor lighthouse, 1920s";
  r.steps = 4;
  r.width = r.height = 16;
  r.count = 2;
  r.seed = 7;
  r.scheduler = kind;
  return r;
}

TEST(SdSample, TheCliWritesTheLibrarysPixels) {
  SdPipeline sd = load_sd_pipeline(tiny("sd15"), {}, torch::kCPU, torch::kFloat32);
  const auto expected = image_grid(generate_images(sd, small_request(unet::SchedulerKind::dpmpp)));
  const fs::path out = scratch("same") / "x.png";
  const auto r = sample({"--pretrained", tiny("sd15"), "--prompt", "a watercolor lighthouse, 1920s", "--steps", "4",
                         "--size", "16x16", "-n", "2", "--seed", "7", "--scheduler", "dpmpp", "--device", "cpu", "-o",
                         out.string()});
  ASSERT_EQ(r.code(), 0) << r.describe();
  EXPECT_TRUE(torch::equal(png_pixels(out), expected));
  // Another seed draws other noise, so other pixels.
  auto other = small_request(unet::SchedulerKind::dpmpp);
  other.seed = 8;
  EXPECT_FALSE(torch::equal(image_grid(generate_images(sd, other)), expected));
}

TEST(SdSample, SdxlUsesBothEncodersAndTheTimeIds) {
  SdPipeline xl = load_sd_pipeline(tiny("sdxl"), {}, torch::kCPU, torch::kFloat32);
  ASSERT_TRUE(xl.is_sdxl());
  EXPECT_EQ(unet::default_scheduler_kind(xl.scheduler), unet::SchedulerKind::euler);  // its scheduler_config.json
  auto r = small_request(unet::SchedulerKind::euler);
  const auto with_zeros = generate_images(xl, r);  // no negative prompt: zero embeddings (force_zeros_for_empty_prompt)
  EXPECT_EQ(with_zeros.sizes(), (std::vector<int64_t>{2, 16, 16, 3}));
  r.negative_prompt = "";
  EXPECT_FALSE(torch::equal(generate_images(xl, r), with_zeros));  // "" is encoded, not zeros
  const fs::path out = scratch("xl") / "x.png";
  const auto cli = sample({"--pretrained", tiny("sdxl"), "--prompt", "x", "--steps", "2", "--size", "8x16",
                           "--negative-prompt", "blurry", "-o", out.string()});
  ASSERT_EQ(cli.code(), 0) << cli.describe();
  EXPECT_EQ(png_pixels(out).sizes(), (std::vector<int64_t>{16, 8, 3}));
}

// The reference pipelines' decoded pixels on the same folders, prompts, seeds and schedulers.
TEST(SdSample, EqualsTheReferencePipelinesPixels) {
  const std::string golden = tiny("golden_pixels.safetensors");
  if (!fs::exists(golden)) GTEST_SKIP() << golden << " not generated yet (scripts/golden/make_sd_pipeline_golden.py)";
  const safetensors::Reader reader(golden);
  for (const auto& info : reader.tensors()) {
    // Names: <pipeline>_<scheduler>, e.g. sd15_ddim; the request is small_request's with that scheduler.
    const std::string name = info.name;
    const size_t cut = name.find('_');
    SdPipeline p = load_sd_pipeline(tiny(name.substr(0, cut)), {}, torch::kCPU, torch::kFloat32);
    const auto ours = generate_images(p, small_request(unet::parse_scheduler_kind(name.substr(cut + 1))));
    const auto theirs = reader.read(name);
    ASSERT_EQ(ours.sizes(), theirs.sizes()) << name;
    const auto diff = (ours.to(torch::kInt) - theirs.to(torch::kInt)).abs();
    EXPECT_LE(diff.max().item<int>(), 2) << name;  // rounding of values within float32 noise of a .5 boundary
    EXPECT_LE(diff.to(torch::kFloat).mean().item<double>(), 0.05) << name;
  }
}

void expect_one_clear_error(const std::vector<std::string>& argv, const std::string& part, const fs::path& out) {
  const auto r = sample(argv);
  EXPECT_EQ(r.code(), 1) << r.describe();
  EXPECT_EQ(one_clear_error_line(r.err), "") << r.err;
  EXPECT_NE(r.err.find(part), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(out)) << "an output was written despite the error";
}

TEST(SdSample, BadInputIsOneClearMessage) {
  const fs::path dir = scratch("bad");
  const std::string out = (dir / "out.png").string();
  for (const char* part : {"vae", "tokenizer"}) {
    const fs::path broken = dir / (std::string("without_") + part);
    fs::copy(tiny("sd15"), broken, fs::copy_options::recursive);
    fs::remove_all(broken / part);
    expect_one_clear_error({"--pretrained", broken.string(), "--prompt", "x", "-o", out},
                           std::string("has no ") + part + "/ (a Stable Diffusion pipeline folder holds", out);
  }
  const std::vector<std::string> base{"--pretrained", tiny("sd15"), "--prompt", "x", "--steps", "1", "-o", out};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), base.begin(), base.end());
    return extra;
  };
  expect_one_clear_error(with({"--size", "512"}), "--size '512': expected WIDTHxHEIGHT", out);
  expect_one_clear_error(with({"--size", "18x16"}), "must be multiples of 4", out);
  expect_one_clear_error(with({"--scheduler", "pndm"}), "unknown scheduler 'pndm'; expected ddim, euler or dpmpp", out);
  expect_one_clear_error({"--pretrained", tiny("sd15"), "--prompt", "x", "-o", (dir / "out.jpg").string()},
                         "must end in .png", dir / "out.jpg");
  expect_one_clear_error(with({"--ema"}), "--ema needs --checkpoint", out);
}

}  // namespace
}  // namespace zest::testing

namespace zest::testing {
namespace {

void write_sample_run(const fs::path& run, const fs::path& data, const fs::path& run_dir, const std::string& sample) {
  std::ofstream(run) << "[model]\npretrained = \"" << tiny("sd15") << "/unet\"\n"
                     << "[data]\ndir = \"" << data.string() << "\"\nbatch_size = 2\nnum_workers = 1\n"
                     << "[engine]\nprecision = \"fp32\"\n[optimizer]\nlr = 1e-3\n[ema]\ndecay = 0.9\n"
                     << "[train]\nmax_steps = 2\nlog_every = 1\nrun_dir = \"" << run_dir.string() << "\"\n"
                     << "[checkpoint]\nmerge_at_end = false\n"
                     << "[sample]\n" << sample;
}

TEST(ValidationSamples, ATinyRunWritesGridsAndListsThemInTheMetrics) {
  const fs::path work = scratch("validation");
  const fs::path data = work / "data", run = work / "run.toml", run_dir = work / "run";
  write_sample_run(run, data, run_dir,
                   "every_steps = 2\nprompts = [\"a red fox\", \"a lighthouse\"]\nsteps = 2\nsize = \"16x8\"\n"
                   "num_images = 3\nscheduler = \"euler\"\n");
  const auto synth = run_cli({zest_binary(), "data", "synth", "--config", run.string(), "--out", data.string(), "--samples", "8"});
  ASSERT_EQ(synth.code(), 0) << synth.describe();
  CliOptions slow;
  slow.timeout_s = 120.0;
  const auto train = run_cli({zest_binary(), "train", run.string()}, slow);
  ASSERT_EQ(train.code(), 0) << train.describe();
  for (const char* name : {"step_00000002_prompt_0.png", "step_00000002_prompt_1.png"}) {
    ASSERT_TRUE(fs::exists(run_dir / "samples" / name)) << train.describe();
    EXPECT_EQ(png_pixels(run_dir / "samples" / name).sizes(), (std::vector<int64_t>{16, 32, 3}));  // 2 × 2 cells of 16x8
  }
  EXPECT_FALSE(fs::exists(run_dir / "samples" / ".weights_for_samples.safetensors"));
  std::ifstream metrics(run_dir / "metrics.jsonl");
  int listed = 0;
  for (std::string line; std::getline(metrics, line);) {
    const auto j = nlohmann::json::parse(line);
    if (!j.contains("validation_samples")) continue;
    ++listed;
    EXPECT_EQ(j.at("step"), 2);
    EXPECT_EQ(j.at("ema"), true);  // the run keeps an EMA: that is what is drawn
    ASSERT_EQ(j.at("validation_samples").size(), 2u);
    EXPECT_EQ(j.at("validation_samples")[1].at("file"), "samples/step_00000002_prompt_1.png");
    EXPECT_EQ(j.at("validation_samples")[1].at("prompt"), "a lighthouse");
  }
  EXPECT_EQ(listed, 1);  // The same grids in TensorBoard's images tab, under their prompts, at their step (train/tensorboard_log.h).
  std::map<std::string, std::string> pictures;
  for (const auto& entry : fs::directory_iterator(run_dir / "tensorboard"))
    for (const auto& e : tb::read_events(entry.path().string()))
      if (e.kind == tb::Event::kImage && e.step == 2) pictures[e.tag] = e.encoded;
  const auto bytes_of = [&](const char* name) {
    std::ifstream in(run_dir / "samples" / name, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  EXPECT_EQ(pictures.size(), 2u);
  EXPECT_EQ(pictures["samples/a red fox"], bytes_of("step_00000002_prompt_0.png"));
  EXPECT_EQ(pictures["samples/a lighthouse"], bytes_of("step_00000002_prompt_1.png"));
}

// The validation grids draw with the configured negative prompt and the same seed at every due step: with
// weights that do not move (lr 1e-30, no EMA), steps 1 and 2 give the same grid, and that grid is the
// library's for the pipeline folder with that negative prompt (not without it).
TEST(ValidationSamples, NegativePromptIsUsedAndTheSeedDoesNotMoveWithTheStep) {
  const fs::path work = scratch("validation_seed");
  const fs::path data = work / "data", run = work / "run.toml", run_dir = work / "run";
  std::ofstream(run) << "[model]\npretrained = \"" << tiny("sd15") << "/unet\"\n"
                     << "[data]\ndir = \"" << data.string() << "\"\nbatch_size = 2\nnum_workers = 1\n"
                     << "[engine]\nprecision = \"fp32\"\n[optimizer]\nlr = 1e-30\nweight_decay = 0.0\n"
                     << "[train]\nmax_steps = 2\nlog_every = 1\nrun_dir = \"" << run_dir.string() << "\"\n"
                     << "[checkpoint]\nmerge_at_end = false\n"
                     << "[sample]\nevery_steps = 1\nprompts = [\"a red fox\"]\nnegative_prompt = \"blurry, dark\"\n"
                     << "steps = 2\nsize = \"16x16\"\nnum_images = 1\nscheduler = \"euler\"\nseed = 11\n";
  const auto synth = run_cli({zest_binary(), "data", "synth", "--config", run.string(), "--out", data.string(), "--samples", "4"});
  ASSERT_EQ(synth.code(), 0) << synth.describe();
  CliOptions slow;
  slow.timeout_s = 120.0;
  const auto train = run_cli({zest_binary(), "train", run.string()}, slow);
  ASSERT_EQ(train.code(), 0) << train.describe();
  const torch::Tensor first = png_pixels(run_dir / "samples" / "step_00000001_prompt_0.png");
  const torch::Tensor second = png_pixels(run_dir / "samples" / "step_00000002_prompt_0.png");
  ASSERT_TRUE(first.defined() && second.defined()) << train.describe();
  EXPECT_TRUE(torch::equal(first, second)) << "the validation noise changed with the step";
  SdPipeline sd = load_sd_pipeline(tiny("sd15"), {}, torch::kCPU, torch::kFloat32);
  SampleRequest r;
  r.prompt = "a red fox";
  r.steps = 2;
  r.width = r.height = 16;
  r.count = 1;
  r.seed = 11;
  r.scheduler = unet::SchedulerKind::euler;
  const torch::Tensor without_negative = image_grid(generate_images(sd, r));
  r.negative_prompt = "blurry, dark";
  const torch::Tensor with_negative = image_grid(generate_images(sd, r));
  EXPECT_GT(largest_pixel_step(with_negative, without_negative), 8 * kPixelRounding);
  EXPECT_LE(largest_pixel_step(first, with_negative), kPixelRounding) << "[sample] negative_prompt was not used";
}

// `zest sample --negative-prompt` reaches the pipeline: the CLI's pixels are the library's with it.
TEST(SdSample, TheCliUsesTheNegativePrompt) {
  SdPipeline sd = load_sd_pipeline(tiny("sd15"), {}, torch::kCPU, torch::kFloat32);
  auto request = small_request(unet::SchedulerKind::dpmpp);
  const auto without = image_grid(generate_images(sd, request));
  request.negative_prompt = "blurry, dark";
  const auto with = image_grid(generate_images(sd, request));
  ASSERT_FALSE(torch::equal(with, without));
  const fs::path out = scratch("negative") / "x.png";
  const auto r = sample({"--pretrained", tiny("sd15"), "--prompt", "a watercolor lighthouse, 1920s", "--steps", "4",
                         "--size", "16x16", "-n", "2", "--seed", "7", "--scheduler", "dpmpp", "--device", "cpu",
                         "--negative-prompt", "blurry, dark", "-o", out.string()});
  ASSERT_EQ(r.code(), 0) << r.describe();
  EXPECT_TRUE(torch::equal(png_pixels(out), with));
}

TEST(ValidationSamples, BadKeysAreOneClearMessage) {
  const fs::path work = scratch("validation_bad");
  auto check = [&](const std::string& sample, const std::string& part) {
    write_sample_run(work / "run.toml", work / "data", work / "run", sample);
    const auto r = run_cli({zest_binary(), "config", "check", (work / "run.toml").string()});
    EXPECT_EQ(r.code(), 1) << r.describe();
    EXPECT_EQ(one_clear_error_line(r.err), "") << r.err;
    EXPECT_NE(r.err.find(part), std::string::npos) << r.err;
  };
  check("every_steps = 5\n", "sample.prompts: needs at least one prompt");
  check("every_steps = 5\nprompts = [\"x\"]\nsize = \"big\"\n", "sample.size: 'big': expected WIDTHxHEIGHT");
  check("every_steps = 5\nprompts = [\"x\"]\nscheduler = \"pndm\"\n", "sample.scheduler: 'pndm'");
  check("validation_prompt = \"x\"\n", "zest calls it prompts");
}

}  // namespace
}  // namespace zest::testing
