// Animated GIF output (GIF89a, looping): frames of palette indices compressed with the format's LZW and
// written atomically. Small on purpose: a fixed palette of at most 256 colours, full frames, one delay.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace zest {

struct GifAnimation {
  int width = 0;
  int height = 0;
  std::vector<std::array<uint8_t, 3>> palette;  // 1..256 RGB colours
  std::vector<std::vector<uint8_t>> frames;     // each width·height palette indices, row-major
  int delay_centiseconds = 3;                   // per frame (GIF counts hundredths of a second)
};

// The GIF file's bytes. Errors: an empty animation, a frame of the wrong size, an index past the palette.
std::string encode_gif(const GifAnimation& animation);

// Writes the animation to `path` (PATH.tmp, fsync, rename); the folder is created.
void write_gif(const std::string& path, const GifAnimation& animation);

}  // namespace zest
