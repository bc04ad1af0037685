// Decoding one image file (JPEG or PNG, from anyone) to 8-bit RGB, as PIL's Image.open(f).convert("RGB")
// gives it to diffusers' training scripts: grey is replicated, alpha dropped, 16-bit samples cut to 8.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace zest {

struct RgbImage {
  int64_t width = 0;
  int64_t height = 0;
  std::vector<uint8_t> pixels;  // row-major, 3 bytes (R, G, B) a pixel

  uint8_t at(int64_t y, int64_t x, int c) const { return pixels[static_cast<size_t>((y * width + x) * 3 + c)]; }
};

struct ImageLimits {
  // Larger images are refused from their header, before any pixel is decoded (a 100 000 × 100 000
  // PNG of a few kilobytes would otherwise ask for 30 GB).
  int64_t max_pixels = int64_t{1} << 26;  // 67 megapixels (8192 × 8192)
  uint64_t max_file_bytes = uint64_t{256} << 20;
  // What the decoder may hold at once. A decode also stays within what the declared size needs: a
  // PNG whose data inflates past its header's size is refused as corrupt (a decompression bomb).
  uint64_t max_decode_bytes = uint64_t{3} << 30;
};

// What kind of file `bytes` hold, from their first bytes: "jpeg", "png", or "" (neither).
std::string sniff_image_format(const std::string& bytes);

// The file at `path` decoded to RGB. Errors (zest::Error) are one line naming the file and what is wrong:
// not a JPEG/PNG, truncated or corrupt (a JPEG whose image data stops early is refused whatever its last
// bytes are), data that inflates past the declared size, a CMYK/YCCK JPEG (4 colour components: PIL and stb convert them
// differently, so zest refuses them rather than guess), larger than `limits`, or not a regular file.
RgbImage decode_image_file(const std::string& path, const ImageLimits& limits = {});

// The same for bytes already read; `name` is the file name used in messages.
RgbImage decode_image_bytes(const std::string& bytes, const std::string& name, const ImageLimits& limits = {});

}  // namespace zest
