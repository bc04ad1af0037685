// PNG and GIF output (data/png_write.h, data/gif_write.h), checked by decoding the files back with an
// independent decoder (stb_image, which reads both) and comparing every pixel and the frame count.
#include "core/check.h"
#include "data/gif_write.h"
#include "data/png_write.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <stb/stb_image.h>  // its implementation: tests/common/stb_image.cpp

namespace zest {
namespace {

namespace fs = std::filesystem;

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

fs::path temp(const std::string& name) {
  const fs::path dir = fs::path(::testing::TempDir()) / "zest_image_write";
  fs::create_directories(dir);
  return dir / name;
}

TEST(ImageWrite, PngDecodesToTheSamePixels) {
  const auto rgb = torch::randint(0, 256, {7, 11, 3}, torch::kUInt8);
  const fs::path path = temp("a.png");
  write_png(path.string(), rgb);
  EXPECT_FALSE(fs::exists(path.string() + ".tmp"));
  const std::string bytes = read_file(path);
  int w = 0, h = 0, c = 0;
  uint8_t* pixels = stbi_load_from_memory(reinterpret_cast<const stbi_uc*>(bytes.data()), static_cast<int>(bytes.size()),
                                          &w, &h, &c, 3);
  ASSERT_NE(pixels, nullptr);
  EXPECT_EQ(w, 11);
  EXPECT_EQ(h, 7);
  const auto decoded = torch::from_blob(pixels, {7, 11, 3}, torch::kUInt8).clone();
  stbi_image_free(pixels);
  EXPECT_TRUE(torch::equal(decoded, rgb));
}

TEST(ImageWrite, GridTilesRowMajor) {
  const auto images = torch::arange(1, 6, torch::kUInt8).view({5, 1, 1, 1}).expand({5, 2, 3, 3}).contiguous();
  const auto grid = image_grid(images);  // 5 images: 3 columns, 2 rows
  ASSERT_EQ(grid.sizes(), (std::vector<int64_t>{4, 9, 3}));
  EXPECT_EQ(grid[0][0][0].item<int>(), 1);
  EXPECT_EQ(grid[0][3][0].item<int>(), 2);
  EXPECT_EQ(grid[2][0][0].item<int>(), 4);
  EXPECT_EQ(grid[3][8][2].item<int>(), 0);  // the sixth cell stays black
}

TEST(ImageWrite, GifDecodesToItsFrames) {
  GifAnimation a;
  a.width = 97;
  a.height = 61;
  for (int i = 0; i < 200; ++i) a.palette.push_back({uint8_t(i), uint8_t(255 - i), uint8_t(i * 7)});
  torch::manual_seed(3);
  for (int f = 0; f < 4; ++f) {
    // Noise overflows the 4096-code table several times (a clear mid-frame); a flat frame grows long codes.
    const auto idx = f == 2 ? torch::full({a.width * a.height}, 17, torch::kUInt8)
                            : torch::randint(0, 200, {a.width * a.height}, torch::kUInt8);
    a.frames.emplace_back(idx.data_ptr<uint8_t>(), idx.data_ptr<uint8_t>() + idx.numel());
  }
  const fs::path path = temp("a.gif");
  write_gif(path.string(), a);
  const std::string bytes = read_file(path);
  int w = 0, h = 0, frames = 0, c = 0;
  int* delays = nullptr;
  uint8_t* pixels = stbi_load_gif_from_memory(reinterpret_cast<const stbi_uc*>(bytes.data()),
                                              static_cast<int>(bytes.size()), &delays, &w, &h, &frames, &c, 3);
  ASSERT_NE(pixels, nullptr) << stbi_failure_reason();
  EXPECT_EQ(w, a.width);
  EXPECT_EQ(h, a.height);
  ASSERT_EQ(frames, 4);
  EXPECT_EQ(delays[0], a.delay_centiseconds * 10);  // stb reports milliseconds
  for (int f = 0; f < frames; ++f) {
    for (int p = 0; p < w * h; ++p) {
      const auto& rgb = a.palette[a.frames[f][p]];
      const uint8_t* got = pixels + (static_cast<size_t>(f) * w * h + p) * 3;
      ASSERT_TRUE(got[0] == rgb[0] && got[1] == rgb[1] && got[2] == rgb[2]) << "frame " << f << " pixel " << p;
    }
  }
  stbi_image_free(pixels);
  stbi_image_free(delays);
}

TEST(ImageWrite, BadInputIsOneClearMessage) {
  EXPECT_THROW(encode_png(torch::zeros({4, 4, 4}, torch::kUInt8)), Error);
  EXPECT_THROW(encode_png(torch::zeros({4, 4, 3}, torch::kFloat32)), Error);
  GifAnimation a;
  a.width = a.height = 2;
  a.palette = {{0, 0, 0}};
  a.frames = {{0, 0, 0, 1}};
  try {
    encode_gif(a);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("frame 0 uses colour 1 of a 1-colour palette"), std::string::npos) << e.what();
  }
  const fs::path folder = temp("is_a_folder.png");
  fs::create_directories(folder);
  EXPECT_THROW(write_png(folder.string(), torch::zeros({2, 2, 3}, torch::kUInt8)), Error);
}

}  // namespace
}  // namespace zest
