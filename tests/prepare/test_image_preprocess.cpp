// Image decoding and preprocessing against PIL (tests/data/prepare/image_reference.json, made by
// scripts/golden/make_image_reference.py): convert("RGB") of grey, grey+alpha, RGBA, palette, 16-bit and
// JPEG files, BILINEAR resizes byte for byte, diffusers' center crop in [-1, 1]; bad files; buckets.
#include "data/aspect_buckets.h"
#include "data/image_decode.h"
#include "data/image_preprocess.h"
#include "core/check.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace zest {
namespace {

std::string data_path(const std::string& name) { return std::string(ZEST_TEST_DATA) + "/prepare/" + name; }

const nlohmann::json& reference() {
  static const nlohmann::json ref = [] {
    std::ifstream in(data_path("image_reference.json"));
    return nlohmann::json::parse(in);
  }();
  return ref;
}

std::vector<uint8_t> from_hex(const std::string& hex) {
  std::vector<uint8_t> bytes(hex.size() / 2);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  return bytes;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

std::string write_file(const std::string& name, const std::string& bytes) {
  const std::string path = (std::filesystem::path(::testing::TempDir()) / name).string();
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

TEST(ImageDecode, PngModesEqualPilConvertRgb) {
  for (const auto& [name, expected] : reference()["decoded"].items()) {
    if (name.ends_with(".jpg")) continue;
    SCOPED_TRACE(name + " (" + expected["mode"].get<std::string>() + ")");
    const RgbImage image = decode_image_file(data_path(name));
    EXPECT_EQ(image.width, expected["width"].get<int64_t>());
    EXPECT_EQ(image.height, expected["height"].get<int64_t>());
    EXPECT_EQ(image.pixels, from_hex(expected["rgb"]));
  }
}

TEST(ImageDecode, JpegWithinDecoderRounding) {
  // libjpeg (PIL) and stb_image use different inverse DCTs and chroma upsampling: a few levels apart.
  const auto& expected = reference()["decoded"]["rgb_37x23.jpg"];
  const RgbImage image = decode_image_file(data_path("rgb_37x23.jpg"));
  ASSERT_EQ(image.width, 37);
  ASSERT_EQ(image.height, 23);
  const std::vector<uint8_t> pil = from_hex(expected["rgb"]);
  int worst = 0;
  double total = 0;
  for (size_t i = 0; i < pil.size(); ++i) {
    const int d = std::abs(int(pil[i]) - int(image.pixels[i]));
    worst = std::max(worst, d);
    total += d;
  }
  EXPECT_LE(worst, 12);
  EXPECT_LE(total / pil.size(), 1.5);
}

TEST(ImageDecode, BadFilesGiveOneMessageNamingTheFile) {
  EXPECT_NE(error_of([] { decode_image_file(data_path("cmyk_9x7.jpg")); }).find("cmyk_9x7.jpg: a CMYK"), std::string::npos);
  const std::string text = write_file("not_an_image.png", "hello, I am text");
  EXPECT_NE(error_of([&] { decode_image_file(text); }).find("not_an_image.png: not a JPEG or PNG"), std::string::npos);
  const std::string empty = write_file("empty.jpg", "");
  EXPECT_NE(error_of([&] { decode_image_file(empty); }).find("the file is empty"), std::string::npos);
  std::ifstream in(data_path("rgb_37x23.png"), std::ios::binary);
  std::stringstream png;
  png << in.rdbuf();
  const std::string cut = write_file("cut.png", png.str().substr(0, png.str().size() / 2));
  EXPECT_NE(error_of([&] { decode_image_file(cut); }).find("cut.png: cannot decode the png data"), std::string::npos);
  std::ifstream jin(data_path("rgb_37x23.jpg"), std::ios::binary);
  std::stringstream jpg;
  jpg << jin.rdbuf();
  const std::string cut_jpeg = write_file("cut.jpg", jpg.str().substr(0, jpg.str().size() - 300));
  EXPECT_NE(error_of([&] { decode_image_file(cut_jpeg); }).find("cut.jpg: truncated JPEG"), std::string::npos);
  EXPECT_NE(error_of([] { decode_image_file("/nonexistent/x.png"); }).find("/nonexistent/x.png"), std::string::npos);
  EXPECT_NE(error_of([] { decode_image_file("/dev/zero"); }).find("character device"), std::string::npos);
}

TEST(ImageDecode, HugeImageRefusedFromItsHeader) {
  // A PNG header claiming 60000 × 60000 pixels, followed by nothing: refused before any decoding.
  std::ifstream in(data_path("rgb_37x23.png"), std::ios::binary);
  std::stringstream png;
  png << in.rdbuf();
  std::string bytes = png.str();
  const unsigned char size[8] = {0, 0, 0xEA, 0x60, 0, 0, 0xEA, 0x60};  // IHDR width, height (big-endian)
  bytes.replace(16, 8, reinterpret_cast<const char*>(size), 8);
  const std::string path = write_file("huge.png", bytes);
  const std::string message = error_of([&] { decode_image_file(path); });
  EXPECT_NE(message.find("huge.png: 60000x60000 pixels is larger than an image may be"), std::string::npos) << message;
  ImageLimits small;
  small.max_pixels = 100;
  EXPECT_NE(error_of([&] { decode_image_file(data_path("rgb_37x23.png"), small); }).find("37x23 pixels is larger"),
            std::string::npos);
  EXPECT_NE(error_of([&] { decode_image_file(data_path("rgb_37x23.jpg"), small); }).find("37x23 pixels is larger"),
            std::string::npos);
}

TEST(ImagePreprocess, BilinearResizeEqualsPilByteForByte) {
  for (const auto& r : reference()["resized"]) {
    const std::string name = r["image"];
    const Size2 size{r["height"].get<int64_t>(), r["width"].get<int64_t>()};
    SCOPED_TRACE(name + " → " + std::to_string(size.width) + "x" + std::to_string(size.height));
    const RgbImage out = resize_bilinear(decode_image_file(data_path(name)), size);
    EXPECT_EQ(out.width, size.width);
    EXPECT_EQ(out.height, size.height);
    EXPECT_EQ(out.pixels, from_hex(r["rgb"]));
  }
}

TEST(ImagePreprocess, CenterCropEqualsDiffusersScript) {
  const auto& c = reference()["center_crop"];
  const RgbImage image = decode_image_file(data_path(c["image"]));
  const int64_t r = c["resolution"];
  EXPECT_EQ(resized_to_cover({image.height, image.width}, {r, r}),
            (Size2{c["resized_height"].get<int64_t>(), c["resized_width"].get<int64_t>()}));
  PreprocessOptions o;
  o.target = {r, r};
  const PreparedImage p = preprocess_image(image, o, 0);
  const auto expected = torch::tensor(c["chw"].get<std::vector<float>>()).view({3, r, r});
  EXPECT_TRUE(torch::equal(p.pixels, expected));
  EXPECT_EQ(p.time_ids, (std::array<int64_t, 6>{23, 37, c["top"].get<int64_t>(), c["left"].get<int64_t>(), r, r}));
}

TEST(ImagePreprocess, TorchvisionGeometry) {
  EXPECT_EQ(resized_to_cover({23, 37}, {16, 16}), (Size2{16, 25}));    // int(16 · 37 / 23) = 25
  EXPECT_EQ(resized_to_cover({700, 500}, {512, 512}), (Size2{716, 512}));
  EXPECT_EQ(resized_to_cover({512, 512}, {512, 512}), (Size2{512, 512}));
  EXPECT_EQ(resized_to_cover({100, 300}, {64, 128}), (Size2{64, 192}));  // a bucket: cover both sides
  EXPECT_EQ(resized_to_cover({300, 100}, {128, 64}), (Size2{192, 64}));
  // Python's round half to even: round(4.5) = 4, round(5.5) = 6.
  EXPECT_EQ(center_crop_offset(25, 16), 4);
  EXPECT_EQ(center_crop_offset(27, 16), 6);
  EXPECT_EQ(center_crop_offset(26, 16), 5);
  EXPECT_EQ(center_crop_offset(16, 16), 0);
}

TEST(ImagePreprocess, RandomCropAndFlipAreSeededAndCovered) {
  const RgbImage image = decode_image_file(data_path("rgb_37x23.png"));
  PreprocessOptions o;
  o.target = {16, 16};
  o.center_crop = false;
  o.random_flip = true;
  std::set<int64_t> lefts;
  int flips = 0;
  for (uint64_t seed = 0; seed < 200; ++seed) {
    const PreparedImage p = preprocess_image(image, o, seed);
    const PreparedImage again = preprocess_image(image, o, seed);
    ASSERT_TRUE(torch::equal(p.pixels, again.pixels));
    const int64_t left = p.flipped ? 16 - p.time_ids[3] : p.time_ids[3];
    EXPECT_GE(left, 0);
    EXPECT_LE(left, 25 - 16);
    EXPECT_EQ(p.time_ids[2], 0);  // 16 rows: no vertical freedom
    lefts.insert(left);
    flips += p.flipped;
    if (p.flipped) {  // the flipped crop is the mirror of the unflipped one at the same offset
      const RgbImage resized = resize_bilinear(image, {16, 25});
      const float v = (resized.at(0, left + 15, 0) / 255.0f - 0.5f) / 0.5f;
      EXPECT_EQ(p.pixels[0][0][0].item<float>(), v);
    }
  }
  EXPECT_EQ(lefts.size(), 10u);  // every offset 0..9 drawn
  EXPECT_GT(flips, 70);
  EXPECT_LT(flips, 130);
}

TEST(AspectBuckets, NearestAtAboutTheSamePixelCount) {
  const std::vector<Size2> b = aspect_buckets(512, 8);
  ASSERT_FALSE(b.empty());
  for (const Size2& s : b) {
    EXPECT_EQ(s.height % 64, 0);
    EXPECT_EQ(s.width % 64, 0);
    EXPECT_LE(s.height * s.width, 512 * 512);
    EXPECT_GE(s.height * s.width, 512 * 512 * 3 / 4) << s.height << "x" << s.width;
  }
  EXPECT_EQ(nearest_bucket(b, {512, 512}), (Size2{512, 512}));
  EXPECT_EQ(nearest_bucket(b, {1000, 1000}), (Size2{512, 512}));
  const Size2 wide = nearest_bucket(b, {360, 640});  // 16:9
  EXPECT_GT(wide.width, wide.height);
  EXPECT_EQ(nearest_bucket(b, {640, 360}), (Size2{wide.width, wide.height}));  // the transpose
  const std::vector<Size2> tiny = aspect_buckets(16, 2);
  EXPECT_EQ(nearest_bucket(tiny, {10, 10}), (Size2{16, 16}));
  EXPECT_EQ(nearest_bucket(tiny, {10, 30}).height, 8);
}

}  // namespace
}  // namespace zest
