// png_pixels: a PNG file decoded to its pixels [H, W, 3] uint8, for the tests that compare pictures zest
// draws; a file that is not a readable PNG is a test failure (and an undefined tensor). stb_image's
// implementation is tests/common/stb_image.cpp.
#pragma once

#include <gtest/gtest.h>
#include <stb/stb_image.h>
#include <torch/torch.h>

#include <cstdint>
#include <filesystem>

namespace zest::testing {

inline torch::Tensor png_pixels(const std::filesystem::path& path) {
  int width = 0, height = 0, channels = 0;
  uint8_t* pixels = stbi_load(path.c_str(), &width, &height, &channels, 3);
  if (pixels == nullptr) {
    ADD_FAILURE() << path << ": not a readable PNG";
    return {};
  }
  torch::Tensor out = torch::from_blob(pixels, {height, width, 3}, torch::kUInt8).clone();
  stbi_image_free(pixels);
  return out;
}

}  // namespace zest::testing
