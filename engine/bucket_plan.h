// Bucket planning: neighbouring units fused into one collective up to engine.bucket_mb (the packing of
// fused pieces is the communicator's business: comm/communicator.h, *_many).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace zest {

// A run of consecutive units [first, last] reduced and gathered together.
struct BucketRange {
  size_t first = 0;
  size_t last = 0;
};

// Groups units (in index order) so each bucket's bytes stay ≤ bucket_bytes; a unit larger than that is
// a bucket of its own. unit_bytes[u] = padded numel × element size.
std::vector<BucketRange> plan_buckets(const std::vector<int64_t>& unit_bytes, int64_t bucket_bytes);

}  // namespace zest
