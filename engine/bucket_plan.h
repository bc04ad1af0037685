// Gradient/parameter buckets: neighbouring units fused into one collective up to engine.bucket_mb, and
// the rank-major packing that keeps every unit's slice r on rank r when fused units are reduce-scattered
// or allgathered together.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace zest {

// A run of consecutive units [first, last] reduced and gathered together.
struct Bucket {
  size_t first = 0;
  size_t last = 0;
};

// Groups units (in index order) so each bucket's bytes stay ≤ bucket_bytes; a unit larger than that is
// a bucket of its own. unit_bytes[u] = padded numel × element size.
std::vector<Bucket> plan_buckets(const std::vector<int64_t>& unit_bytes, int64_t bucket_bytes);

// Rank-major packing of full unit buffers (each [world·S_u]) into one [world · ΣS_u] buffer laid out as
// world rows of [slice of unit 0 | slice of unit 1 | …]: reduce-scatter / allgather on it then moves
// exactly each unit's rank-r slice to rank r.
torch::Tensor pack_rank_major(const std::vector<torch::Tensor>& unit_buffers, int world_size);
void unpack_rank_major(const torch::Tensor& packed, const std::vector<torch::Tensor>& unit_buffers,
                       int world_size);

}  // namespace zest
