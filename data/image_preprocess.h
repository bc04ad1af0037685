// The image side of diffusers' train_text_to_image.py / train_text_to_image_sdxl.py, reproduced for
// `zest data prepare images`: resize (PIL's bilinear filter, bit for bit), center or random crop,
// random horizontal flip, to float in [-1, 1], and SDXL's size/crop conditioning (docs/data_formats.md).
#pragma once

#include "data/image_decode.h"

#include <torch/torch.h>

#include <array>
#include <cstdint>

namespace zest {

struct Size2 {
  int64_t height = 0;
  int64_t width = 0;
  bool operator==(const Size2& o) const { return height == o.height && width == o.width; }
  bool operator<(const Size2& o) const { return height != o.height ? height < o.height : width < o.width; }
};

// PIL's Image.resize((width, height), Image.BILINEAR) of an RGB image: separable triangle filter whose
// support widens with the downscale factor (antialiasing), 22-bit fixed-point coefficients, the
// horizontal pass first and rounded to 8 bits, then the vertical pass. The same bytes as PIL.
RgbImage resize_bilinear(const RgbImage& image, Size2 size);

// The size torchvision's Resize(r) (an int: the shorter side) gives an image of `size`: the shorter side
// becomes r, the longer int(r · long / short). For a bucket (target of another shape): the smallest
// such scaling that covers `target` (the side that is relatively shorter becomes the target's).
Size2 resized_to_cover(Size2 size, Size2 target);

// torchvision's CenterCrop offset: int(round((size − crop) / 2.0)) with Python's round half to even.
int64_t center_crop_offset(int64_t size, int64_t crop);

struct PreprocessOptions {
  Size2 target;             // the crop (the resolution, or the image's aspect bucket)
  bool center_crop = true;  // false: random crop (offsets uniform over every position)
  bool random_flip = false; // flip horizontally with probability 1/2
};

struct PreparedImage {
  torch::Tensor pixels;  // [3, target.height, target.width] float32 in [-1, 1]: (v / 255 − 0.5) / 0.5
  // SDXL's conditioning as the SDXL script computes it: (original_h, original_w, crop_top, crop_left,
  // target_h, target_w). A flipped image's crop_left is target_w − left, as the script records it.
  std::array<int64_t, 6> time_ids{};
  bool flipped = false;
};

// Resize to cover the target, crop, flip; the random choices (crop offsets, flip) come from `seed` alone.
PreparedImage preprocess_image(const RgbImage& image, const PreprocessOptions& options, uint64_t seed);

}  // namespace zest
