// Bucket planning and rank-major packing (see bucket_plan.h).
#include "engine/bucket_plan.h"

#include "core/check.h"

namespace zest {

std::vector<BucketRange> plan_buckets(const std::vector<int64_t>& unit_bytes, int64_t bucket_bytes) {
  std::vector<BucketRange> buckets;
  int64_t filled = 0;
  for (size_t u = 0; u < unit_bytes.size(); ++u) {
    if (buckets.empty() || filled + unit_bytes[u] > bucket_bytes) {
      buckets.push_back({u, u});
      filled = unit_bytes[u];
    } else {
      buckets.back().last = u;
      filled += unit_bytes[u];
    }
  }
  return buckets;
}

}  // namespace zest
