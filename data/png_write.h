// PNG output of generated pictures: uint8 RGB images [H, W, 3] encoded with stb_image_write (header-only,
// Debian's libstb-dev) and written atomically (NAME.tmp, fsync, rename), and n images tiled into one grid.
#pragma once

#include <torch/torch.h>

#include <string>

namespace zest {

// PNG bytes of `rgb` [H, W, 3] uint8 (any device; copied to the CPU).
std::string encode_png(const torch::Tensor& rgb);

// Writes `rgb` [H, W, 3] uint8 to `path` (.png): PATH.tmp then rename, so an existing file is kept whole
// or replaced whole. The folder is created; `path` must not be a folder, device or link.
void write_png(const std::string& path, const torch::Tensor& rgb);

// [N, H, W, 3] → one [rows·H, cols·W, 3] image, cols = ⌈√N⌉, rows = ⌈N / cols⌉, row-major, the unused cells black.
torch::Tensor image_grid(const torch::Tensor& images);

}  // namespace zest
