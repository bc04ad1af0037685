// Preprocessing of training images: PIL-exact bilinear resampling (fixed point, two passes), torchvision's
// resize/crop geometry, the flip and the [-1, 1] normalisation.
#include "data/image_preprocess.h"

#include "core/check.h"
#include "data/seed.h"

#include <algorithm>
#include <cmath>
#include <random>

namespace zest {
namespace {

// PIL keeps 8-bit resampling coefficients as integers with this many fraction bits (32 − 8 − 2: a sum of
// 8-bit values times coefficients stays inside a 32-bit int).
constexpr int kPrecisionBits = 22;

double triangle(double x) {
  x = std::abs(x);
  return x < 1.0 ? 1.0 - x : 0.0;
}

// For each output position: the first input position it reads and the integer weights of the inputs.
struct Taps {
  std::vector<int64_t> first;
  std::vector<int64_t> count;
  std::vector<int32_t> weights;  // count positions used of `width` per output position
  int64_t width = 0;
};

Taps taps_for(int64_t in_size, int64_t out_size) {
  const double scale = static_cast<double>(in_size) / static_cast<double>(out_size);
  const double filter_scale = std::max(scale, 1.0);  // downscaling widens the filter: antialiasing
  const double support = 1.0 * filter_scale;         // the triangle's half-width is 1
  Taps t;
  t.width = static_cast<int64_t>(std::ceil(support)) * 2 + 1;
  t.first.resize(out_size);
  t.count.resize(out_size);
  t.weights.assign(static_cast<size_t>(out_size * t.width), 0);
  std::vector<double> w(static_cast<size_t>(t.width));
  const double inverse_scale = 1.0 / filter_scale;  // PIL multiplies by it (not the same bits as dividing)
  for (int64_t o = 0; o < out_size; ++o) {
    const double center = (static_cast<double>(o) + 0.5) * scale;
    // C's truncating casts, as PIL computes them (only values about to be clamped differ from floor).
    const int64_t lo = std::max<int64_t>(0, static_cast<int64_t>(center - support + 0.5));
    const int64_t hi = std::min<int64_t>(in_size, static_cast<int64_t>(center + support + 0.5));
    const int64_t n = hi - lo;
    double total = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      w[i] = triangle((static_cast<double>(i + lo) - center + 0.5) * inverse_scale);
      total += w[i];
    }
    for (int64_t i = 0; i < n; ++i) {
      const double k = total != 0.0 ? w[i] / total : w[i];
      const double fixed = k * static_cast<double>(1 << kPrecisionBits);
      t.weights[o * t.width + i] = static_cast<int32_t>(k < 0 ? fixed - 0.5 : fixed + 0.5);  // truncation toward 0
    }
    t.first[o] = lo;
    t.count[o] = n;
  }
  return t;
}

uint8_t clip8(int32_t sum) {
  if (sum >= (1 << kPrecisionBits << 8)) return 255;
  if (sum <= 0) return 0;
  return static_cast<uint8_t>(sum >> kPrecisionBits);
}

RgbImage resample_rows(const RgbImage& in, int64_t out_width) {  // horizontal pass
  const Taps t = taps_for(in.width, out_width);
  RgbImage out;
  out.width = out_width;
  out.height = in.height;
  out.pixels.resize(static_cast<size_t>(out.width * out.height * 3));
  for (int64_t y = 0; y < in.height; ++y) {
    for (int64_t x = 0; x < out_width; ++x) {
      const int32_t* k = &t.weights[x * t.width];
      for (int c = 0; c < 3; ++c) {
        int32_t sum = 1 << (kPrecisionBits - 1);  // rounds the final shift
        for (int64_t i = 0; i < t.count[x]; ++i) sum += in.at(y, t.first[x] + i, c) * k[i];
        out.pixels[(y * out_width + x) * 3 + c] = clip8(sum);
      }
    }
  }
  return out;
}

RgbImage resample_columns(const RgbImage& in, int64_t out_height) {  // vertical pass
  const Taps t = taps_for(in.height, out_height);
  RgbImage out;
  out.width = in.width;
  out.height = out_height;
  out.pixels.resize(static_cast<size_t>(out.width * out.height * 3));
  for (int64_t y = 0; y < out_height; ++y) {
    const int32_t* k = &t.weights[y * t.width];
    for (int64_t x = 0; x < in.width; ++x) {
      for (int c = 0; c < 3; ++c) {
        int32_t sum = 1 << (kPrecisionBits - 1);
        for (int64_t i = 0; i < t.count[y]; ++i) sum += in.at(t.first[y] + i, x, c) * k[i];
        out.pixels[(y * in.width + x) * 3 + c] = clip8(sum);
      }
    }
  }
  return out;
}

// Uniform in [0, n) from raw mt19937_64 output (std::uniform_int_distribution is implementation-defined).
int64_t uniform_below(std::mt19937_64& gen, int64_t n) {
  const uint64_t un = static_cast<uint64_t>(n);
  const uint64_t threshold = (0 - un) % un;
  for (;;) {
    const uint64_t r = gen();
    if (r >= threshold) return static_cast<int64_t>(r % un);
  }
}

}  // namespace

RgbImage resize_bilinear(const RgbImage& image, Size2 size) {
  ZEST_CHECK(size.height > 0 && size.width > 0, "resize: target size ", size.height, "x", size.width, " is empty");
  // PIL skips a pass whose size does not change (so an image already the right size is copied unchanged).
  RgbImage out = size.width != image.width ? resample_rows(image, size.width) : image;
  if (size.height != out.height) out = resample_columns(out, size.height);
  return out;
}

Size2 resized_to_cover(Size2 size, Size2 target) {
  // Width-limited when target_w / w >= target_h / h (compared exactly, in integers).
  if (target.width * size.height >= target.height * size.width) {
    const double h = static_cast<double>(target.width * size.height) / static_cast<double>(size.width);
    return {static_cast<int64_t>(h), target.width};
  }
  const double w = static_cast<double>(target.height * size.width) / static_cast<double>(size.height);
  return {target.height, static_cast<int64_t>(w)};
}

int64_t center_crop_offset(int64_t size, int64_t crop) {
  const int64_t d = size - crop;
  if (d % 2 == 0) return d / 2;
  const int64_t below = d / 2;  // d / 2.0 = below + 0.5: rounds to the even neighbour
  return below % 2 == 0 ? below : below + 1;
}

PreparedImage preprocess_image(const RgbImage& image, const PreprocessOptions& o, uint64_t seed) {
  const Size2 original{image.height, image.width};
  const Size2 resized_size = resized_to_cover(original, o.target);
  const RgbImage resized = resize_bilinear(image, resized_size);
  std::mt19937_64 gen(mix_seed(seed, 0x1ea9e));
  int64_t top = 0, left = 0;
  if (o.center_crop) {
    top = std::max<int64_t>(0, center_crop_offset(resized.height, o.target.height));
    left = std::max<int64_t>(0, center_crop_offset(resized.width, o.target.width));
  } else {
    top = uniform_below(gen, resized.height - o.target.height + 1);
    left = uniform_below(gen, resized.width - o.target.width + 1);
  }
  PreparedImage p;
  p.flipped = o.random_flip && (gen() >> 11) * 0x1.0p-53 < 0.5;
  const int64_t th = o.target.height, tw = o.target.width;
  auto pixels = torch::empty({3, th, tw}, torch::kFloat32);
  float* out = pixels.data_ptr<float>();
  for (int64_t y = 0; y < th; ++y) {
    for (int64_t x = 0; x < tw; ++x) {
      const int64_t source_x = left + (p.flipped ? tw - 1 - x : x);
      for (int c = 0; c < 3; ++c) {
        // torchvision: ToTensor (v / 255 in float32), then Normalize(0.5, 0.5).
        const float v = static_cast<float>(resized.at(top + y, source_x, c)) / 255.0f;
        out[(c * th + y) * tw + x] = (v - 0.5f) / 0.5f;
      }
    }
  }
  p.pixels = pixels;
  p.time_ids = {original.height, original.width, top, p.flipped ? tw - left : left, th, tw};
  return p;
}

}  // namespace zest
