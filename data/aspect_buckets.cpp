// Aspect-ratio buckets: the bucket list of a resolution and the nearest bucket of an image.
#include "data/aspect_buckets.h"

#include "core/check.h"

#include <algorithm>
#include <cmath>

namespace zest {

std::vector<Size2> aspect_buckets(int64_t resolution, int64_t multiple) {
  ZEST_CHECK(multiple >= 1 && resolution >= multiple && resolution % multiple == 0, "buckets: resolution ",
             resolution, " must be a multiple of ", multiple);
  int64_t step = resolution >= 256 ? 64 : resolution / 4;
  step = std::max(multiple, step / multiple * multiple);
  const int64_t area = resolution * resolution;
  const int64_t low = std::max(step, resolution / 2 / step * step), high = 2 * resolution;
  std::vector<Size2> buckets{{resolution, resolution}};
  for (int64_t w = low; w <= high; w += step) {
    const int64_t h = std::min(high, area / w / step * step);
    if (h < low) continue;
    buckets.push_back({h, w});
    buckets.push_back({w, h});
  }
  auto ratio = [](const Size2& s) { return static_cast<double>(s.width) / static_cast<double>(s.height); };
  std::sort(buckets.begin(), buckets.end(), [&](const Size2& a, const Size2& b) {
    return ratio(a) != ratio(b) ? ratio(a) < ratio(b) : a.width * a.height > b.width * b.height;
  });
  // One bucket an aspect ratio: the largest (first after the sort).
  std::vector<Size2> unique;
  for (const Size2& b : buckets)
    if (unique.empty() || ratio(unique.back()) != ratio(b)) unique.push_back(b);
  return unique;
}

Size2 nearest_bucket(const std::vector<Size2>& buckets, Size2 image) {
  ZEST_CHECK(!buckets.empty() && image.height > 0 && image.width > 0, "buckets: no bucket or an empty image");
  const double target = std::log(static_cast<double>(image.width) / static_cast<double>(image.height));
  size_t best = 0;
  double best_distance = INFINITY;
  for (size_t i = 0; i < buckets.size(); ++i) {
    const double d =
        std::abs(std::log(static_cast<double>(buckets[i].width) / static_cast<double>(buckets[i].height)) - target);
    if (d < best_distance) {
      best = i;
      best_distance = d;
    }
  }
  return buckets[best];
}

}  // namespace zest
