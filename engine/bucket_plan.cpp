// Bucket planning and rank-major packing (see bucket_plan.h).
#include "engine/bucket_plan.h"

#include "core/check.h"

namespace zest {

std::vector<Bucket> plan_buckets(const std::vector<int64_t>& unit_bytes, int64_t bucket_bytes) {
  std::vector<Bucket> buckets;
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

torch::Tensor pack_rank_major(const std::vector<torch::Tensor>& unit_buffers, int world_size) {
  ZEST_CHECK(!unit_buffers.empty(), "pack_rank_major: no buffers");
  int64_t row = 0;
  for (const auto& b : unit_buffers) row += b.numel() / world_size;
  auto packed = torch::empty({world_size, row}, unit_buffers.front().options());
  int64_t col = 0;
  for (const auto& b : unit_buffers) {
    const int64_t s = b.numel() / world_size;
    packed.narrow(1, col, s).copy_(b.view({world_size, s}));
    col += s;
  }
  return packed.view({-1});
}

void unpack_rank_major(const torch::Tensor& packed, const std::vector<torch::Tensor>& unit_buffers,
                       int world_size) {
  const auto rows = packed.view({world_size, -1});
  int64_t col = 0;
  for (const auto& b : unit_buffers) {
    const int64_t s = b.numel() / world_size;
    b.view({world_size, s}).copy_(rows.narrow(1, col, s));
    col += s;
  }
}

}  // namespace zest
