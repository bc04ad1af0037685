// Element spans and ranges: index arithmetic over flat buffers, shared by the engine (unit slices), the
// optimizers (decay ranges) and checkpoints (re-slicing). Pure values, no tensors.
#pragma once

#include <cstdint>

namespace zest {

// A run of `numel` elements starting at `begin` (a rank's slice of a unit, a unit's part of a shard).
struct ElementSpan {
  int64_t begin = 0;
  int64_t numel = 0;
  int64_t end() const { return begin + numel; }
};

// A half-open run [begin, end), relative to the start of the buffer it indexes.
struct ElementRange {
  int64_t begin = 0;
  int64_t end = 0;
};

}  // namespace zest
