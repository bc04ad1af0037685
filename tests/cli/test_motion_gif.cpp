// HY-Motion skeleton GIFs (pipelines/motion_gif.h): a synthetic walk drawn into frames decoded back with
// stb_image (frame count, size, the bone colours present and moving), and bad input as one clear message.
#include "core/check.h"
#include "pipelines/motion_gif.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <stb/stb_image.h>  // its implementation: tests/common/stb_image.cpp

namespace zest {
namespace {

namespace fs = std::filesystem;

// [frames, 201]: a T-pose-like skeleton (joints spread over a 1.7 m figure) walking along x.
torch::Tensor walking_motion(int64_t frames) {
  auto m = torch::zeros({frames, 201});
  const float rest[22][3] = {{0, 1.0f, 0},     {0.1f, 0.9f, 0},   {-0.1f, 0.9f, 0},  {0, 1.1f, 0},    {0.1f, 0.5f, 0},
                             {-0.1f, 0.5f, 0}, {0, 1.25f, 0},     {0.1f, 0.08f, 0},  {-0.1f, 0.08f, 0}, {0, 1.35f, 0},
                             {0.1f, 0, 0.1f},  {-0.1f, 0, 0.1f},  {0, 1.5f, 0},     {0.08f, 1.42f, 0}, {-0.08f, 1.42f, 0},
                             {0, 1.65f, 0},    {0.18f, 1.42f, 0}, {-0.18f, 1.42f, 0}, {0.42f, 1.42f, 0}, {-0.42f, 1.42f, 0},
                             {0.65f, 1.42f, 0}, {-0.65f, 1.42f, 0}};
  for (int64_t f = 0; f < frames; ++f) {
    for (int j = 0; j < 22; ++j) {
      const float swing = (j == 7 || j == 10 ? 1 : j == 8 || j == 11 ? -1 : 0) * 0.2f * std::sin(0.3f * f);
      m[f][135 + 3 * j] = rest[j][0] + 0.02f * f;
      m[f][135 + 3 * j + 1] = rest[j][1];
      m[f][135 + 3 * j + 2] = rest[j][2] + swing;
    }
  }
  return m;
}

TEST(MotionGif, ASampledMotionDecodesToItsFramesWithTheSkeletonDrawn) {
  const fs::path path = fs::path(::testing::TempDir()) / "zest_motion_gif" / "walk.gif";
  write_motion_gif(path.string(), walking_motion(40));  // 30 fps → every second frame
  std::ifstream in(path, std::ios::binary);
  std::ostringstream bytes;
  bytes << in.rdbuf();
  const std::string data = bytes.str();
  int w = 0, h = 0, frames = 0, c = 0;
  int* delays = nullptr;
  uint8_t* pixels = stbi_load_gif_from_memory(reinterpret_cast<const stbi_uc*>(data.data()), static_cast<int>(data.size()),
                                              &delays, &w, &h, &frames, &c, 3);
  ASSERT_NE(pixels, nullptr) << stbi_failure_reason();
  EXPECT_EQ(w, 256);
  EXPECT_EQ(h, 256);
  EXPECT_EQ(frames, 20);
  EXPECT_EQ(delays[0], 70);  // 7 cs: ~15 frames per second, real time
  auto count = [&](int frame, uint8_t r, uint8_t g, uint8_t b) {
    int n = 0;
    for (int i = 0; i < w * h; ++i) {
      const uint8_t* px = pixels + (static_cast<size_t>(frame) * w * h + i) * 3;
      n += px[0] == r && px[1] == g && px[2] == b;
    }
    return n;
  };
  for (const int f : {0, 19}) {
    EXPECT_GT(count(f, 80, 150, 255), 20) << "left limbs in frame " << f;
    EXPECT_GT(count(f, 255, 105, 90), 20) << "right limbs in frame " << f;
    EXPECT_GT(count(f, 78, 82, 94), 100) << "ground grid in frame " << f;
  }
  EXPECT_NE(std::memcmp(pixels, pixels + static_cast<size_t>(19) * w * h * 3, static_cast<size_t>(w) * h * 3), 0)
      << "the skeleton does not move";
  stbi_image_free(pixels);
  stbi_image_free(delays);
}

TEST(MotionGif, BadInputIsOneClearMessage) {
  try {
    joint_positions(torch::zeros({10, 135}));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("expected HY-Motion features [frames, 201]"), std::string::npos) << e.what();
  }
  auto nan = walking_motion(4);
  nan[2][140] = std::nanf("");
  EXPECT_THROW(render_skeleton(joint_positions(nan)), Error);
}

}  // namespace
}  // namespace zest
