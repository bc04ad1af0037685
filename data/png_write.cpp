// PNG encoding through stb_image_write into memory, then the atomic write (see png_write.h).
#include "data/png_write.h"

#include "checkpoint/output_path.h"
#include "core/check.h"

#include <cmath>

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wunused-function"
#define STB_IMAGE_WRITE_IMPLEMENTATION
#define STB_IMAGE_WRITE_STATIC
#include <stb/stb_image_write.h>
#pragma GCC diagnostic pop

namespace zest {
namespace {

void append_bytes(void* context, void* data, int size) {
  static_cast<std::string*>(context)->append(static_cast<const char*>(data), static_cast<size_t>(size));
}

}  // namespace

std::string encode_png(const torch::Tensor& rgb) {
  ZEST_CHECK(rgb.dim() == 3 && rgb.size(2) == 3 && rgb.scalar_type() == torch::kUInt8,
             "PNG: expected a [H, W, 3] uint8 image, got ", rgb.sizes(), " ", rgb.scalar_type());
  ZEST_CHECK(rgb.size(0) > 0 && rgb.size(1) > 0 && rgb.size(0) < (1 << 20) && rgb.size(1) < (1 << 20),
             "PNG: image size ", rgb.size(1), "x", rgb.size(0), " is out of range");
  const auto pixels = rgb.to(torch::kCPU).contiguous();
  std::string out;
  const int width = static_cast<int>(pixels.size(1)), height = static_cast<int>(pixels.size(0));
  const int ok = stbi_write_png_to_func(append_bytes, &out, width, height, 3, pixels.data_ptr<uint8_t>(), width * 3);
  ZEST_CHECK(ok != 0 && !out.empty(), "PNG: encoding a ", width, "x", height, " image failed");
  return out;
}

void write_png(const std::string& path, const torch::Tensor& rgb) {
  checkpoint::write_output_file(path, encode_png(rgb));
}

torch::Tensor image_grid(const torch::Tensor& images) {
  ZEST_CHECK(images.dim() == 4 && images.size(0) > 0, "image grid: expected [N, H, W, C], got ", images.sizes());
  const int64_t n = images.size(0), h = images.size(1), w = images.size(2);
  const auto cols = static_cast<int64_t>(std::ceil(std::sqrt(static_cast<double>(n))));
  const int64_t rows = (n + cols - 1) / cols;
  auto grid = torch::zeros({rows * h, cols * w, images.size(3)}, images.options());
  for (int64_t i = 0; i < n; ++i) {
    grid.slice(0, (i / cols) * h, (i / cols + 1) * h).slice(1, (i % cols) * w, (i % cols + 1) * w).copy_(images[i]);
  }
  return grid;
}

}  // namespace zest
