// Aspect-ratio buckets for `zest data prepare images --buckets` (as kohya's sd-scripts users know them):
// target sizes of about resolution² pixels in steps of a few pixels, and the nearest bucket of an image.
#pragma once

#include "data/image_preprocess.h"

#include <vector>

namespace zest {

// Buckets for `resolution` whose sides are multiples of `multiple` (prepare: 8 latent pixels, 64 for SD): every
// width from resolution/2 to 2·resolution in steps of `step` (64 for resolution ≥ 256, else resolution/4,
// both rounded to `multiple`), each with the largest height (same step) keeping width × height ≤
// resolution², and the transposes; sorted by aspect ratio (width / height), no duplicates. Always holds
// the square resolution × resolution.
std::vector<Size2> aspect_buckets(int64_t resolution, int64_t multiple);

// The bucket whose aspect ratio is nearest the image's in log ratio (a 2:1 image is as far from 1:1 as a
// 1:2 one); a tie goes to the earlier bucket.
Size2 nearest_bucket(const std::vector<Size2>& buckets, Size2 image);

}  // namespace zest
