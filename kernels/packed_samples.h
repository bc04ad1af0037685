// Rows of several samples stored one after another with no padding (HY-Motion's valid tokens, packed):
// what the per-sample kernels (modulated layer norm, gated residual) read to find each row's sample.
#pragma once

#include <cstdint>

namespace zest {

// Sample b's rows are starts[b] .. starts[b + 1] − 1 of `rows` (starts: int32 [batch + 1] in device
// memory, starts[0] = 0, non-decreasing). starts == nullptr: every sample has the same row count.
struct PackedSamples {
  const int32_t* starts = nullptr;
  int64_t rows = 0;
};

}  // namespace zest

#ifdef __CUDACC__
namespace zest::kernels {

// Sample b's rows: [first, first + count).
struct SampleRange {
  int64_t first = 0, count = 0;
};

__device__ __forceinline__ SampleRange sample_range(const PackedSamples& s, int64_t b, int64_t seq) {
  if (s.starts == nullptr) return {b * seq, seq};
  return {s.starts[b], static_cast<int64_t>(s.starts[b + 1] - s.starts[b])};
}

// The sample that holds `row`: the last b with starts[b] <= row (a binary search over batch + 1 starts,
// read from cache), so that empty samples are passed over.
__device__ __forceinline__ int64_t sample_of_row(const PackedSamples& s, int64_t row, int64_t batch, int64_t seq) {
  if (s.starts == nullptr) return row / seq;
  int64_t lo = 0, hi = batch;
  while (hi - lo > 1) {
    const int64_t mid = (lo + hi) / 2;
    if (s.starts[mid] <= row) lo = mid;
    else hi = mid;
  }
  return lo;
}

}  // namespace zest::kernels
#endif
