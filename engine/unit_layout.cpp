// UnitLayout arithmetic (see unit_layout.h).
#include "engine/unit_layout.h"

#include "core/check.h"

namespace zest {

int64_t padded_numel_for(int64_t numel, int world_size) {
  ZEST_CHECK(world_size >= 1, "world size ", world_size, " must be >= 1");
  const int64_t align = world_size * kPadMultiple;
  const int64_t padded = (numel + align - 1) / align * align;
  return padded == 0 ? align : padded;  // an empty unit still owns one aligned slice per rank
}

UnitLayout make_unit_layout(std::string name, std::vector<ParamSlot> slots, int world_size) {
  UnitLayout layout;
  layout.name = std::move(name);
  layout.world_size = world_size;
  int64_t offset = 0;
  for (auto& slot : slots) {
    slot.offset = offset;
    offset += slot.numel;
  }
  layout.slots = std::move(slots);
  layout.numel = offset;
  layout.padded_numel = padded_numel_for(offset, world_size);
  return layout;
}

UnitLayout relayout(const UnitLayout& layout, int world_size) {
  UnitLayout out = layout;
  out.world_size = world_size;
  out.padded_numel = padded_numel_for(layout.numel, world_size);
  return out;
}

}  // namespace zest
