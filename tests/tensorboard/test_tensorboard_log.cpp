// TensorBoardLog (train/tensorboard_log.h) read back with the independent reader: the file's first
// records, the scalars of a metrics record under their tags, PNG and GIF pictures, a resumed run's new
// file and its session start, the folder left alone when inactive, and write errors in one line.
#include "common/temp_dir.h"
#include "event_file_reader.h"

#include "core/check.h"
#include "data/gif_write.h"
#include "data/png_write.h"
#include "train/tensorboard_log.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>

namespace zest::testing {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> event_files(const std::string& run_dir) {
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(fs::path(run_dir) / "tensorboard"))
    if (entry.path().filename().string().rfind("events.out.tfevents.", 0) == 0) files.push_back(entry.path().string());
  std::sort(files.begin(), files.end());  // TensorBoard's reading order
  return files;
}

TensorBoardLog::Setup setup_for(const std::string& run_dir, int64_t start_step = 0) {
  return {run_dir, 2, "frames", start_step, "[train]\nmax_steps = 10\n"};
}

GifAnimation two_frame_gif() {
  GifAnimation gif;
  gif.width = 5;
  gif.height = 3;
  gif.palette = {{0, 0, 0}, {255, 255, 255}};
  gif.frames = {std::vector<uint8_t>(15, 0), std::vector<uint8_t>(15, 1)};
  return gif;
}

TEST(TensorBoardLog, WritesVersionConfigScalarsAndPictures) {
  const TempDir dir("tb_log");
  TensorBoardLog log(true, setup_for(dir.path()));
  StepRecord r;
  r.step = 4;
  r.loss = 0.75;
  r.lr = 1e-3;
  r.grad_norm = 2.5;
  r.loss_scale = 1.0;
  r.skipped_total = 1;
  r.samples_per_s = 64.0;
  r.items_per_s = 2048.0;
  r.step_ms = 12.5;
  r.data_wait_ms = 0.5;
  r.host_rss_bytes = 3LL << 30;
  r.host_peak_rss_bytes = 4LL << 30;
  r.saved = true;
  r.checkpoint_stall_ms = 30.0;
  log.record(r);
  const std::string png = encode_png(torch::zeros({6, 9, 3}, torch::kUInt8));
  const std::string png_file = dir.file("grid.png");
  std::ofstream(png_file, std::ios::binary) << png;
  log.pictures(4, {{"samples/a cat", png_file}});
  log.animation("samples/walk", 4, two_frame_gif());
  log.finish();

  const auto files = event_files(dir.path());
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(files[0], log.path());
  const auto events = tb::read_events(files[0]);
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events[0].file_version, "brain.Event:2");
  EXPECT_EQ(events[1].kind, tb::Event::kText);
  EXPECT_EQ(events[1].tag, "config");
  EXPECT_EQ(events[1].step, 0);
  EXPECT_EQ(events[1].plugin, "text");
  EXPECT_EQ(events[1].text, "    [train]\n    max_steps = 10\n");  // a Markdown code block

  std::map<std::string, float> scalars;
  std::vector<tb::Event> images;
  for (const auto& e : events) {
    if (e.kind == tb::Event::kScalar) {
      EXPECT_EQ(e.step, 4) << e.tag;
      scalars[e.tag] = e.value;
    }
    if (e.kind == tb::Event::kImage) images.push_back(e);
  }
  const std::map<std::string, float> expected = {
      {"train/loss", 0.75f},
      {"train/lr", 1e-3f},
      {"train/grad_norm", 2.5f},
      {"train/loss_scale", 1.0f},
      {"train/skipped_steps", 1.0f},
      {"throughput/samples_per_s_per_gpu", 32.0f},  // two ranks
      {"throughput/frames_per_s_per_gpu", 1024.0f},
      {"time/step_ms", 12.5f},
      {"time/data_wait_ms", 0.5f},
      {"time/checkpoint_stall_ms", 30.0f},
      {"memory/host_rss_gib", 3.0f},
      {"memory/host_peak_rss_gib", 4.0f}};  // no GPU: no gpu_* tags
  EXPECT_EQ(scalars, expected);

  ASSERT_EQ(images.size(), 2u);
  EXPECT_EQ(images[0].tag, "samples/a cat");
  EXPECT_EQ(images[0].encoded, png);
  EXPECT_EQ(images[0].width, 9);
  EXPECT_EQ(images[0].height, 6);
  EXPECT_EQ(images[1].tag, "samples/walk");
  EXPECT_EQ(images[1].encoded, encode_gif(two_frame_gif()));
  EXPECT_EQ(images[1].width, 5);
  EXPECT_EQ(images[1].height, 3);
}

// A resumed run adds a file that sorts after the first (even within the same second) and starts with a
// session start just past the resumed step, so TensorBoard drops a crashed run's steps after its checkpoint.
TEST(TensorBoardLog, AResumeAddsAFileThatSortsLast) {
  const TempDir dir("tb_resume");
  std::string first_path;
  {
    TensorBoardLog first(true, setup_for(dir.path()));
    first_path = first.path();
    first.finish();
  }
  TensorBoardLog second(true, setup_for(dir.path(), 20));
  second.finish();
  const auto files = event_files(dir.path());
  ASSERT_EQ(files.size(), 2u);
  EXPECT_EQ(files[0], first_path);
  EXPECT_EQ(files[1], second.path());
  const auto events = tb::read_events(files[1]);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_TRUE(events[1].session_start);
  EXPECT_EQ(events[1].step, 21);
  EXPECT_EQ(events[2].tag, "config");
  EXPECT_EQ(events[2].step, 20);
}

TEST(TensorBoardLog, InactiveWritesNothing) {
  const TempDir dir("tb_off");
  TensorBoardLog log(false, setup_for(dir.path()));
  StepRecord r;
  log.record(r);
  log.finish();
  EXPECT_FALSE(fs::exists(fs::path(dir.path()) / "tensorboard"));
}

TEST(TensorBoardLog, ErrorsNameTheFileAndTheSwitch) {
  const TempDir dir("tb_errors");
  std::ofstream(dir.file("tensorboard")) << "a file where the folder goes";
  try {
    TensorBoardLog log(true, setup_for(dir.path()));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(dir.file("tensorboard")), std::string::npos) << what;
    EXPECT_NE(what.find("[log] tensorboard = false"), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
  EXPECT_THROW(encoded_picture_size("not a picture"), Error);
}

TEST(TensorBoardLog, PromptTagsStayApart) {
  EXPECT_EQ(prompt_tags({"a cat", "a dog", "a cat"}),
            (std::vector<std::string>{"samples/a cat", "samples/a dog", "samples/a cat (2)"}));
}

// HY-Motion with num_images = 2 writes two GIFs a prompt: each stays under its own prompt's tag (pairing
// files with tags by position put the first prompt's second GIF under the second prompt).
TEST(TensorBoardLog, EachPromptsPicturesStayUnderItsTag) {
  using Tagged = std::vector<std::pair<std::string, std::string>>;
  EXPECT_EQ(picture_tags({"a jump", "a walk"}, {{"j1.gif", "j2.gif"}, {"w1.gif", "w2.gif"}}),
            (Tagged{{"samples/a jump/1", "j1.gif"},
                    {"samples/a jump/2", "j2.gif"},
                    {"samples/a walk/1", "w1.gif"},
                    {"samples/a walk/2", "w2.gif"}}));
  EXPECT_EQ(picture_tags({"a cat", "a cat"}, {{"c1.png"}, {"c2.png"}}),
            (Tagged{{"samples/a cat", "c1.png"}, {"samples/a cat (2)", "c2.png"}}));
  // A motion without a skeleton has no GIF: the next prompt keeps its own tag.
  EXPECT_EQ(picture_tags({"odd", "a walk"}, {{}, {"w.gif"}}), (Tagged{{"samples/a walk", "w.gif"}}));
  EXPECT_THROW(picture_tags({"one"}, {{"a.png"}, {"b.png"}}), Error);
}

}  // namespace
}  // namespace zest::testing
