// ElementSpan: a run of elements of a flat buffer, the one index type shared by the engine (a rank's slice
// of a unit, its owned part), the optimizers (decay spans) and checkpoints (re-slicing). Pure values.
#pragma once

#include <cstdint>

namespace zest {

// A run of `numel` elements starting at `begin` (a rank's slice of a unit, a unit's part of a shard).
struct ElementSpan {
  int64_t begin = 0;
  int64_t numel = 0;
  int64_t end() const { return begin + numel; }
};

}  // namespace zest
