// UnitLayout: where every parameter of a unit lives in the unit's flat buffer, the padding, and which
// slice each rank owns. Pure arithmetic (no tensors), shared by the engine, checkpoints and resharding.
#pragma once

#include "core/element_span.h"

#include <cstdint>
#include <string>
#include <vector>

namespace zest {

// Flat buffers are padded to a multiple of world_size · kPadMultiple elements, so every rank's slice is
// equal and 16-element aligned.
inline constexpr int64_t kPadMultiple = 16;

struct ParamSlot {
  std::string name;                  // state-dict name (first occurrence)
  std::vector<std::string> aliases;  // further names of a tied (shared) parameter
  std::vector<int64_t> shape;
  int64_t offset = 0;                // first element in the unit's flat buffer
  int64_t numel = 0;
  bool decay = true;                 // receives weight decay
};

struct UnitLayout {
  std::string name;
  std::vector<ParamSlot> slots;  // in named_parameters() order, offsets increasing
  int64_t numel = 0;             // Σ slot numel
  int64_t padded_numel = 0;      // multiple of world_size · kPadMultiple
  int world_size = 1;

  int64_t shard_numel() const { return padded_numel / world_size; }
  // Rank r's slice: [r·S, (r+1)·S).
  ElementSpan slice(int rank) const { return {rank * shard_numel(), shard_numel()}; }
};

int64_t padded_numel_for(int64_t numel, int world_size);

// Assigns offsets in slot order and computes the padding for `world_size`.
UnitLayout make_unit_layout(std::string name, std::vector<ParamSlot> slots, int world_size);

// The same unit laid out for another world size (offsets unchanged, padding recomputed).
UnitLayout relayout(const UnitLayout& layout, int world_size);

}  // namespace zest
