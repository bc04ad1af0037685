// HY-Motion from words, end to end on the CPU with tiny models: captioned clips (name.txt or metadata.jsonl
// captions) → `zest data prepare motions` (HY-Motion's text features made by its own encoders, bad clips skipped
// with their reason, all or nothing, continued after a kill or SIGINT) → `zest train` from the release →
// `zest sample --prompt` → motion .npy and skeleton GIF; and the text-encoder folders found from the release's
// layout, or one clear message.
#include "tiny_text_encoders.h"

#include "cli/cli_test_util.h"
#include "common/first_write_hook.h"
#include "tests/finetune/finetune_test_util.h"
#include "tensorboard/event_file_reader.h"

#include "comm/self_communicator.h"
#include "core/interrupt.h"
#include "data/dataset.h"
#include "data/image_prepare.h"
#include "data/prepare_work.h"
#include "data/motion_prepare.h"
#include "formats/npy.h"
#include "models/hy_text/hy_text_encoder.h"
#include "pipelines/motion_gif.h"

#include <gtest/gtest.h>

#include <csignal>
#include <fstream>
#include <map>
#include <sstream>

namespace zest::hytext::test {
namespace {

namespace fs = std::filesystem;
using zest::testing::CliResult;
using zest::testing::one_clear_error_line;
using zest::testing::run_cli;
using zest::testing::write_hymotion_release;
namespace tb = zest::testing::tb;

fs::path words_scratch(const std::string& name) {
  const fs::path dir = fs::path(::testing::TempDir()) / "zest_motion_words" / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void write_file(const fs::path& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

void write_clip(const fs::path& dir, const std::string& stem, const torch::Tensor& clip, const std::string& caption) {
  write_file(dir / (stem + ".npy"), npy::encode(clip));
  if (!caption.empty()) write_file(dir / (stem + ".txt"), caption + "\n");
}

const std::vector<std::string> kCaptions = {"a person walks forward and waves", "someone jumps twice",
                                            "a man turns left, then sits down", "dancing happily in a circle"};

// Four good clips of the released width and one of each kind of bad one.
void write_clips(const fs::path& dir) {
  fs::create_directories(dir);
  torch::manual_seed(3);
  for (size_t i = 0; i < kCaptions.size(); ++i)
    write_clip(dir, "clip" + std::to_string(i), 0.3 * torch::randn({8 + 2 * static_cast<int64_t>(i), kMotionFeatures}), kCaptions[i]);
  write_clip(dir, "narrow", torch::zeros({10, 12}), "too few features");
  torch::Tensor nan = torch::zeros({6, kMotionFeatures});
  nan[4][7] = std::nan("");
  write_clip(dir, "nan", nan, "holds a NaN");
  write_clip(dir, "empty", torch::zeros({0, kMotionFeatures}), "no frames");
  write_clip(dir, "long", torch::zeros({40, kMotionFeatures}), "forty frames");
  write_clip(dir, "uncaptioned", torch::zeros({5, kMotionFeatures}), "");
  write_file(dir / "broken.npy", "this is not a NumPy file");
  write_file(dir / "broken.txt", "a broken file");
}

CliResult run_zest(std::vector<std::string> args) {
  args.insert(args.begin(), zest::testing::zest_binary());
  return run_cli(args);
}

std::vector<std::string> prepare_args(const fs::path& w, const fs::path& out, const std::string& piece_clips = "4") {
  return {"data", "prepare", "motions", "--pretrained", (w / "release").string(), "--text-encoders", (w / "enc").string(),
          "--motions", (w / "clips").string(), "--out", out.string(), "--text-tokens", "8", "--max-frames", "30",
          "--batch-size", "3", "--piece-clips", piece_clips};
}

TEST(MotionFromWords, PrepareTrainAndSampleFromAPrompt) {
  const fs::path w = words_scratch("e2e");
  write_hymotion_release((w / "release").string(), 13, kMotionFeatures);
  write_tiny_text_encoders(w / "enc");
  write_clips(w / "clips");

  const CliResult prepared = run_zest(prepare_args(w, w / "data"));
  ASSERT_EQ(prepared.code(), 0) << prepared.describe();
  EXPECT_NE(prepared.out.find("wrote 4 samples in 1 shard(s)"), std::string::npos) << prepared.out;
  for (const std::string reason : {"has 12 features per frame; the model takes 201", "holds NaN or Inf values (first in frame 4)",
                                   "is empty (0 frames)", "is too long: 40 frames, more than --max-frames 30",
                                   "no caption: uncaptioned.txt is missing", "is not a .npy file"}) {
    EXPECT_NE(prepared.out.find(reason), std::string::npos) << reason << "\n" << prepared.out;
  }
  EXPECT_FALSE(fs::exists(w / "data.partial"));
  // The dataset's text features are the encoders' own for the captions (in listing order: clip0 .. clip3).
  const auto dataset = open_dataset((w / "data").string(), {}, nullptr);
  ASSERT_EQ(dataset->size(), 4);
  const HyTextEncoder encoder(find_text_encoders("", (w / "enc").string()), torch::kCPU, torch::kFloat32, 8);
  const MotionTextFeatures expected = encoder.encode(kCaptions);
  const auto shard = safetensors::load_file((w / "data" / "shard-00000.safetensors").string());
  std::map<std::string, torch::Tensor> tensors(shard.begin(), shard.end());
  EXPECT_TRUE(torch::allclose(tensors.at("text_tokens"), expected.ctxt, 1e-5, 1e-6));
  EXPECT_TRUE(torch::allclose(tensors.at("text_pooled"), expected.vtxt, 1e-5, 1e-6));
  EXPECT_TRUE(tensors.at("text_mask").sum(1).to(torch::kInt64).equal(expected.ctxt_length));
  EXPECT_EQ(tensors.at("motion_offsets")[4].item<int64_t>(), 8 + 10 + 12 + 14);

  const CliResult trained = run_zest({"train", std::string(ZEST_SOURCE_DIR) + "/configs/hymotion_finetune.toml", "--set",
                                  "model.pretrained=\"" + (w / "release").string() + "\"", "--set",
                                  "data.dir=\"" + (w / "data").string() + "\"", "--set", "data.batch_size=2", "--set",
                                  "data.num_workers=1", "--set", "data.seq_len=12", "--set", "engine.precision=\"fp32\"",
                                  "--set", "train.max_steps=2", "--set", "train.run_dir=\"" + (w / "run").string() + "\"",
                                  "--set", "scheduler.warmup_steps=1", "--set", "checkpoint.every_steps=2",
                                  // validation motions of two prompts at step 2, as `zest sample --prompt` draws them
                                  "--set", "sample.every_steps=2", "--set",
                                  "sample.prompts=[\"a person jumps\", \"a person waves\"]", "--set",
                                  "sample.text_encoders=\"" + (w / "enc").string() + "\"", "--set", "sample.frames=6",
                                  "--set", "sample.steps=2", "--set", "sample.num_images=2"});
  ASSERT_EQ(trained.code(), 0) << trained.describe();
  const torch::Tensor validation = npy::read((w / "run" / "samples" / "step_00000002_prompt_0.npy").string());
  EXPECT_EQ(validation.sizes(), (std::vector<int64_t>{2, 6, kMotionFeatures}));
  // TensorBoard shows each skeleton GIF under its own prompt at its step, the file's own bytes.
  std::map<std::string, tb::Event> pictures;
  for (const auto& entry : fs::directory_iterator(w / "run" / "tensorboard")) {
    if (entry.path().filename().string().rfind("events.out.tfevents.", 0) != 0) continue;
    for (const tb::Event& e : tb::read_events(entry.path().string()))
      if (e.kind == tb::Event::kImage) pictures.emplace(e.tag, e);
  }
  ASSERT_EQ(pictures.size(), 4u);
  for (const auto& [prompt, index] : {std::pair{"a person jumps", 0}, std::pair{"a person waves", 1}}) {
    for (int k = 0; k < 2; ++k) {
      const std::string tag = "samples/" + std::string(prompt) + "/" + std::to_string(k + 1);
      ASSERT_TRUE(pictures.count(tag)) << tag;
      const tb::Event& picture = pictures.at(tag);
      EXPECT_EQ(picture.step, 2);
      const fs::path file =
          w / "run" / "samples" / ("step_00000002_prompt_" + std::to_string(index) + "_" + std::to_string(k) + ".gif");
      std::ifstream gif_file(file, std::ios::binary);
      const std::string gif{std::istreambuf_iterator<char>(gif_file), {}};
      EXPECT_EQ(picture.encoded.substr(0, 6), "GIF89a") << tag;
      EXPECT_EQ(picture.encoded, gif) << tag << " is not " << file;
      EXPECT_GT(picture.width, 0);
      EXPECT_GT(picture.height, 0);
    }
  }

  // The text folders found from the release's own layout: ckpts/Qwen3-8B beside ckpts/tencent/HY-Motion-1.0.
  fs::create_directories(w / "ckpts" / "tencent");
  fs::rename(w / "release", w / "ckpts" / "tencent" / "HY-Motion-1.0");
  for (const char* name : {"Qwen3-8B", "clip-vit-large-patch14"}) fs::rename(w / "enc" / name, w / "ckpts" / name);
  const fs::path out = w / "out" / "motion.npy";
  const CliResult sampled = run_zest({"sample", "--pretrained", (w / "ckpts" / "tencent" / "HY-Motion-1.0").string(), "--weights",
                                  (w / "run" / "model.safetensors").string(), "--prompt", "a person walks forward and waves",
                                  "--text-tokens", "8", "--frames", "10", "--steps", "3", "-n", "2", "-o", out.string()});
  ASSERT_EQ(sampled.code(), 0) << sampled.describe();
  EXPECT_NE(sampled.out.find("encoded by Qwen3"), std::string::npos) << sampled.out;
  const torch::Tensor motion = npy::read(out.string());
  EXPECT_EQ(motion.sizes(), (std::vector<int64_t>{2, 10, kMotionFeatures}));
  EXPECT_TRUE(motion.isfinite().all().item<bool>());
  for (const char* gif : {"motion_0.gif", "motion_1.gif"}) EXPECT_TRUE(fs::exists(w / "out" / gif)) << gif;
}

TEST(MotionFromWords, AnUnfinishedPrepareOfOtherOptionsIsNotContinued) {
  const fs::path w = words_scratch("resume");
  write_hymotion_release((w / "release").string(), 13, kMotionFeatures);
  write_tiny_text_encoders(w / "enc");
  write_clips(w / "clips");
  fs::create_directories(w / "data.partial" / "pieces");
  write_file(w / "data.partial" / "job.json", "{\"format\": \"zest.prepare_motions.v1\", \"text_tokens\": 99}\n");
  const CliResult r = run_zest(prepare_args(w, w / "data"));
  EXPECT_EQ(r.code(), 1) << r.describe();
  EXPECT_NE(r.err.find("was started with other options or another clip listing"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(w / "data"));
}

std::string file_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(MotionFromWords, TwoRanksEncodeTheirShareAndGiveTheSameDataset) {
  const fs::path w = words_scratch("ranks");
  write_hymotion_release((w / "release").string(), 13, kMotionFeatures);
  write_tiny_text_encoders(w / "enc");
  write_clips(w / "clips");
  ASSERT_EQ(run_zest(prepare_args(w, w / "one", "2")).code(), 0);
  std::vector<std::string> two{"launch", "-n", "2", "--", zest::testing::zest_binary()};
  const std::vector<std::string> args = prepare_args(w, w / "two", "2");
  two.insert(two.end(), args.begin(), args.end());
  const CliResult r = run_zest(two);
  ASSERT_EQ(r.code(), 0) << r.describe();
  EXPECT_NE(r.out.find("[rank 1]: piece 2/5"), std::string::npos) << r.out;  // rank 1 took pieces 2 and 4
  for (const char* name : {"shard-00000.safetensors", "stats.safetensors", "skipped.txt"})
    EXPECT_EQ(file_bytes(w / "one" / name), file_bytes(w / "two" / name)) << name;
}

PrepareMotionsOptions in_process_options(const fs::path& w, const fs::path& out) {
  PrepareMotionsOptions o;
  o.pretrained = (w / "release").string();
  o.text_encoders = (w / "enc").string();
  o.motions = (w / "clips").string();
  o.out = out.string();
  o.text_tokens = 8;
  o.max_frames = 30;
  o.batch_size = 3;
  o.piece_clips = 2;  // 9 captioned clips (write_clips): 5 pieces
  o.device = "cpu";
  return o;
}

void expect_same_files(const fs::path& a, const fs::path& b) {
  for (const char* name : {"shard-00000.safetensors", "stats.safetensors", "skipped.txt", "dataset.json"}) {
    ASSERT_TRUE(fs::exists(a / name)) << a / name;
    EXPECT_EQ(file_bytes(a / name), file_bytes(b / name)) << name;
  }
}

// The image prepare's PrepareImages.ResumesAfterAKillAndAfterSigint for motion clips: a prepare killed after
// its first piece, then interrupted by SIGINT after its second, continues from its finished pieces and gives
// the dataset of an uninterrupted prepare, byte for byte.
TEST(MotionFromWords, PrepareResumesAfterAKillAndAfterSigint) {
  const fs::path w = words_scratch("resume_after_stop");
  write_hymotion_release((w / "release").string(), 13, kMotionFeatures);
  write_tiny_text_encoders(w / "enc");
  write_clips(w / "clips");
  SelfCommunicator self;
  std::ostringstream quiet;
  const PrepareMotionsReport whole = prepare_motions(in_process_options(w, w / "whole"), self, quiet);
  ASSERT_EQ(whole.pieces_total, 5);
  ASSERT_EQ(whole.samples, 4);

  // A kill after the first piece: the run ends there (the log throws); a piece cut off by it is left too.
  zest::testing::FirstWriteHook killer([] { throw std::runtime_error("killed"); });
  std::ostream killed_log(&killer);
  killed_log.exceptions(std::ios::badbit);
  EXPECT_ANY_THROW(prepare_motions(in_process_options(w, w / "data"), self, killed_log));
  const fs::path work = prepare_work_folder((w / "data").string());
  ASSERT_TRUE(fs::exists(work / "pieces" / "piece-000000.safetensors"));
  EXPECT_FALSE(fs::exists(work / "pieces" / "piece-000001.safetensors"));
  write_file(work / "pieces" / "piece-000001.safetensors.tmp", "half a piece");
  EXPECT_FALSE(fs::exists(w / "data"));

  // SIGINT after the second piece: the run stops at the next clip, keeps its finished pieces, writes no dataset.
  {
    const InterruptGuard guard;
    zest::testing::FirstWriteHook interrupter([] { std::raise(SIGINT); });
    std::ostream log(&interrupter);
    try {
      prepare_motions(in_process_options(w, w / "data"), self, log);
      ADD_FAILURE() << "SIGINT did not stop the prepare";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("rerun the same command to continue"), std::string::npos) << e.what();
    }
    reset_interrupt();
  }
  EXPECT_FALSE(fs::exists(w / "data"));
  EXPECT_TRUE(fs::exists(work / "pieces" / "piece-000001.safetensors"));
  EXPECT_FALSE(fs::exists(work / "pieces" / "piece-000001.safetensors.tmp"));
  EXPECT_FALSE(fs::exists(work / "pieces" / "piece-000002.safetensors"));

  // The same command through the CLI continues from the two finished pieces.
  const CliResult finished = run_zest(prepare_args(w, w / "data", "2"));
  ASSERT_EQ(finished.code(), 0) << finished.describe();
  EXPECT_EQ(finished.out.find("piece 1/5"), std::string::npos) << "a finished piece was encoded again\n" << finished.out;
  EXPECT_EQ(finished.out.find("piece 2/5"), std::string::npos) << "a finished piece was encoded again\n" << finished.out;
  EXPECT_NE(finished.out.find("piece 5/5"), std::string::npos) << finished.out;
  EXPECT_FALSE(fs::exists(work));
  expect_same_files(w / "whole", w / "data");
}

// Captions from a metadata.jsonl of {"file_name": "walk.npy", "text": ...} lines (diffusers' ImageFolder form,
// as the README shows for clips) give the dataset the name.txt captions give; a line naming no clip, a clip
// the file does not list, and a caption list (its first caption is used) are handled as for images.
TEST(MotionFromWords, MetadataJsonlCaptionsGiveTheSameDataset) {
  const fs::path w = words_scratch("metadata");
  write_hymotion_release((w / "release").string(), 13, kMotionFeatures);
  write_tiny_text_encoders(w / "enc");
  torch::manual_seed(3);
  fs::create_directories(w / "txt");
  fs::create_directories(w / "jsonl");
  std::ostringstream metadata;
  for (size_t i = 0; i < kCaptions.size(); ++i) {
    const torch::Tensor clip = 0.3 * torch::randn({8 + 2 * static_cast<int64_t>(i), kMotionFeatures});
    const std::string stem = "clip" + std::to_string(i);
    write_clip(w / "txt", stem, clip, kCaptions[i]);
    write_clip(w / "jsonl", stem, clip, "");
    const nlohmann::json text = i == 1 ? nlohmann::json::array({kCaptions[i], "another caption"}) : nlohmann::json(kCaptions[i]);
    metadata << nlohmann::json{{"file_name", stem + ".npy"}, {"text", text}}.dump() << "\n";
  }
  metadata << nlohmann::json{{"file_name", "gone.npy"}, {"text", "a clip that is not there"}}.dump() << "\n";
  write_file(w / "jsonl" / "metadata.jsonl", metadata.str());
  write_clip(w / "jsonl", "unlisted", torch::zeros({6, kMotionFeatures}), "");

  auto prepare = [&](const std::string& clips, const std::string& out) {
    const CliResult r = run_zest({"data", "prepare", "motions", "--pretrained", (w / "release").string(), "--text-encoders",
                                  (w / "enc").string(), "--motions", (w / clips).string(), "--out", (w / out).string(),
                                  "--text-tokens", "8"});
    EXPECT_EQ(r.code(), 0) << r.describe();
    return r;
  };
  prepare("txt", "from_txt");
  const CliResult from_jsonl = prepare("jsonl", "from_jsonl");
  EXPECT_NE(from_jsonl.out.find("wrote 4 samples"), std::string::npos) << from_jsonl.out;
  for (const char* name : {"shard-00000.safetensors", "stats.safetensors"})
    EXPECT_EQ(file_bytes(w / "from_txt" / name), file_bytes(w / "from_jsonl" / name)) << name;
  const std::string skipped = file_bytes(w / "from_jsonl" / "skipped.txt");
  EXPECT_NE(skipped.find("metadata.jsonl line 5\tlists gone.npy, which is not a motion clip file in the folder"),
            std::string::npos) << skipped;
  EXPECT_NE(skipped.find("unlisted.npy\tnot listed in metadata.jsonl"), std::string::npos) << skipped;
  EXPECT_NE(file_bytes(w / "from_jsonl" / "dataset.json").find("metadata.jsonl (column text)"), std::string::npos);
}

TEST(MotionFromWords, MissingFoldersAreOneClearMessage) {
  const fs::path w = words_scratch("bad");
  write_hymotion_release((w / "release").string(), 13, kMotionFeatures);
  write_clips(w / "clips");
  auto expect_error = [&](const std::vector<std::string>& args, const std::string& part) {
    const CliResult r = run_zest(args);
    EXPECT_EQ(r.code(), 1) << r.describe();
    EXPECT_EQ(one_clear_error_line(r.err), "") << r.err;
    EXPECT_NE(r.err.find(part), std::string::npos) << r.err;
  };
  const std::string release = (w / "release").string(), out = (w / "motion.npy").string();
  expect_error({"sample", "--pretrained", release, "--prompt", "a person walks", "-o", out},
               "HY-Motion's text encoders were not found: no folder holding Qwen3-8B/ and clip-vit-large-patch14/");
  expect_error({"sample", "--pretrained", release, "--prompt", "a walk", "--text-encoders", (w / "nowhere").string(), "-o", out},
               "no such folder (--text-encoders names the folder holding Qwen3-8B/ and clip-vit-large-patch14/)");
  fs::create_directories(w / "enc" / "Qwen3-8B");
  expect_error({"sample", "--pretrained", release, "--prompt", "a walk", "--text-encoders", (w / "enc").string(), "-o", out},
               "has no clip-vit-large-patch14/");
  write_tiny_clip_l(w / "enc" / "clip-vit-large-patch14", 16, 1);
  expect_error({"sample", "--pretrained", release, "--prompt", "a walk", "--text-encoders", (w / "enc").string(), "-o", out},
               "no tokenizer.json");
  expect_error({"sample", "--pretrained", release, "--prompt", "a walk", "--random-text", "-o", out},
               "give one of --prompt TEXT, --text DATASET|SHARD (cached text features) or --random-text");
  EXPECT_FALSE(fs::exists(out));
  // Text encoders of other widths than the network's: named with both folders before any clip is read.
  write_tiny_text_encoders(w / "wide", 32, 16);
  expect_error({"data", "prepare", "motions", "--pretrained", release, "--text-encoders", (w / "wide").string(), "--motions",
                (w / "clips").string(), "--out", (w / "data").string()},
               "the network takes text features of 24 (Qwen3) and 16 (CLIP), but");
  EXPECT_FALSE(fs::exists(w / "data"));
  expect_error({"data", "prepare", "motions", "--pretrained", release, "--text-encoders", (w / "wide").string(), "--motions",
                (w / "no_clips").string(), "--out", (w / "data").string()},
               "no such folder (--motions needs a folder of motion clips)");
}

}  // namespace
}  // namespace zest::hytext::test
