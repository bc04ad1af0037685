// EngineState's look-ups, its layout check and the component configurations as TOML (see engine_state.h).
#include "engine/engine_state.h"

#include "core/check.h"
#include "core/config_writer.h"

namespace zest {
namespace {

template <typename Config>
std::string toml_text_of(const Config& config) {
  ConfigWriter root;
  to_toml(config, root);
  return root.str();
}

std::string span_text(ElementSpan span) { return str("[", span.begin, ", ", span.end(), ")"); }

// The first difference between two layouts of one unit, "" when they agree.
std::string layout_difference(const UnitLayout& a, const UnitLayout& b) {
  if (a.name != b.name) return "is '" + a.name + "' here, '" + b.name + "' in the state";
  if (a.numel != b.numel || a.padded_numel != b.padded_numel || a.world_size != b.world_size)
    return str("holds ", a.numel, " elements padded to ", a.padded_numel, " for ", a.world_size, " rank(s) here, ",
               b.numel, " padded to ", b.padded_numel, " for ", b.world_size, " in the state");
  if (a.slots.size() != b.slots.size())
    return str("has ", a.slots.size(), " parameters here, ", b.slots.size(), " in the state");
  for (size_t i = 0; i < a.slots.size(); ++i) {
    const ParamSlot& x = a.slots[i];
    const ParamSlot& y = b.slots[i];
    if (x.name != y.name || x.offset != y.offset || x.numel != y.numel || x.shape != y.shape)
      return str("parameter ", i, " is ", x.name, " (", x.numel, " elements at ", x.offset, ") here, ", y.name, " (",
                 y.numel, " elements at ", y.offset, ") in the state");
  }
  return "";
}

}  // namespace

ComponentTomls to_toml_texts(const ComponentConfigs& configs) {
  return {toml_text_of(configs.engine), toml_text_of(configs.optimizer), toml_text_of(configs.scheduler),
          configs.ema ? toml_text_of(*configs.ema) : ""};
}

std::vector<std::string> EngineState::shard_names() const {
  std::vector<std::string> names;
  for (const NamedShard& s : shards) names.push_back(s.name);
  return names;
}

const NamedShard* EngineState::find_shard(const std::string& name) const {
  for (const NamedShard& s : shards)
    if (s.name == name) return &s;
  return nullptr;
}

const torch::Tensor& EngineState::shard(const std::string& name) const {
  const NamedShard* found = find_shard(name);
  if (found) return found->flat;
  std::string names;
  for (const NamedShard& s : shards) names += (names.empty() ? "" : ", ") + s.name;
  ZEST_FAIL("engine state: no shard named '", name, "' (it has: ", names, ")");
}

int64_t EngineState::flat_numel() const {
  int64_t numel = 0;
  for (const UnitShardLayout& unit : units) numel += unit.owned.numel;
  return numel;
}

void check_same_layout(const EngineState& expected, const EngineState& other, const std::string& what) {
  ZEST_CHECK(expected.rank == other.rank && expected.world_size == other.world_size && expected.stage == other.stage,
             what, ": the state is rank ", other.rank, " of ", other.world_size, " at stage ", other.stage,
             ", this engine rank ", expected.rank, " of ", expected.world_size, " at stage ", expected.stage);
  ZEST_CHECK(expected.units.size() == other.units.size(), what, ": the state has ", other.units.size(),
             " unit(s), this engine ", expected.units.size());
  for (size_t u = 0; u < expected.units.size(); ++u) {
    const UnitShardLayout& a = expected.units[u];
    const UnitShardLayout& b = other.units[u];
    const std::string difference = layout_difference(a.layout, b.layout);
    ZEST_CHECK(difference.empty(), what, ": unit ", u, " ", difference, " (a state of another layout)");
    ZEST_CHECK(a.owned.begin == b.owned.begin && a.owned.numel == b.owned.numel &&
                   a.in_flat.begin == b.in_flat.begin && a.in_flat.numel == b.in_flat.numel,
               what, ": unit ", u, " (", a.layout.name, ") holds ", span_text(a.owned), " at ", span_text(a.in_flat),
               " of the flat shards here, ", span_text(b.owned), " at ", span_text(b.in_flat), " in the state");
  }
}

}  // namespace zest
