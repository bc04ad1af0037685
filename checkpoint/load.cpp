// Checkpoint loading: manifest agreement, compatibility report, file checks, staged range reads,
// then the state swap (see load.h).
#include "checkpoint/load.h"

#include "checkpoint/config_diff.h"
#include "checkpoint/directory.h"
#include "checkpoint/rank_agreement.h"
#include "checkpoint/shard_reader.h"
#include "checkpoint/verify.h"
#include "core/check.h"

#include <filesystem>
#include <iostream>
#include <map>
#include <set>

namespace zest::checkpoint {
namespace {

struct SlotRef {
  size_t unit = 0;
  const ParamSlot* slot = nullptr;
};

// Checkpoint parameters by name and alias (a tied parameter is found under each of its names).
std::map<std::string, SlotRef> index_params(const Manifest& m) {
  std::map<std::string, SlotRef> index;
  for (size_t u = 0; u < m.units.size(); ++u) {
    for (const ParamSlot& slot : m.units[u].slots) {
      index[slot.name] = {u, &slot};
      for (const std::string& alias : slot.aliases) index.emplace(alias, SlotRef{u, &slot});
    }
  }
  return index;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

// "a, b, c and 12 more": long lists stay readable.
std::string name_list(const std::vector<std::string>& names) {
  constexpr size_t kShown = 8;
  std::string out;
  for (size_t i = 0; i < names.size() && i < kShown; ++i) out += (i ? ", " : "") + names[i];
  if (names.size() > kShown) out += " and " + std::to_string(names.size() - kShown) + " more";
  return out;
}

void compare_parameters(const Manifest& m, const EngineState& state, std::vector<std::string>& errors) {
  const auto index = index_params(m);
  std::set<std::string> used;
  std::vector<std::string> missing, shapes;
  for (const UnitShardLayout& unit : state.units) {
    for (const ParamSlot& slot : unit.layout.slots) {
      used.insert(slot.name);
      for (const auto& alias : slot.aliases) used.insert(alias);
      const auto it = index.find(slot.name);
      if (it == index.end()) {
        missing.push_back(slot.name);
      } else if (it->second.slot->shape != slot.shape) {
        shapes.push_back(slot.name + " " + shape_text(it->second.slot->shape) + " in the checkpoint, " +
                         shape_text(slot.shape) + " in the model");
      }
    }
  }
  std::vector<std::string> unexpected;
  for (const UnitLayout& unit : m.units)
    for (const ParamSlot& slot : unit.slots)
      if (!used.count(slot.name)) unexpected.push_back(slot.name);
  if (!missing.empty())
    errors.push_back(str(missing.size(), " model parameter(s) missing from the checkpoint: ", name_list(missing)));
  if (!unexpected.empty())
    errors.push_back(str(unexpected.size(), " checkpoint parameter(s) not in the model: ", name_list(unexpected)));
  for (const auto& s : shapes) errors.push_back("shape of " + s);
}

// ---- settings: the components' TOML tables, key by key ----

constexpr const char* kRunValueApplies = " (the run's value applies)";

Precision saved_precision(const std::string& name) {
  const std::optional<Precision> p = precision_named(name);
  ZEST_CHECK(p, "checkpoint precision '", name, "' is not fp32, bf16 or fp16");  // parse_manifest refuses it first
  return *p;
}

// The configurations the checkpoint records, the run's where it records none: of the [engine] table it
// records the precision (compared here) and the stage (reported with the world size, as a reshard).
ComponentConfigs saved_configs(const Manifest& m, const EngineState& now) {
  ComponentConfigs saved = now.configs;
  saved.engine.precision = saved_precision(m.precision);
  saved.optimizer = m.optimizer;
  saved.scheduler = m.scheduler;
  saved.ema = m.ema;
  return saved;
}

bool is_recorded_engine_key(const std::string& key) { return key == "engine.precision"; }

void note_differences(const std::string& saved, const std::string& now, std::vector<std::string>& notes,
                      bool (*is_recorded)(const std::string&) = nullptr) {
  for (const ConfigDifference& d : diff_config(saved, now))
    if (!is_recorded || is_recorded(d.key)) notes.push_back(d.text() + kRunValueApplies);
}

// A checkpoint's EMA and the run's [ema] need not agree: a saved EMA without [ema] is left unread, an
// [ema] without a saved one starts from the resumed weights (Engine::load_state), and settings that
// differ take the run's values. Each case is a note.
void compare_ema(const Manifest& m, const EngineState& now, const ComponentTomls& saved,
                 const ComponentTomls& current, std::vector<std::string>& notes) {
  const bool keeps_ema = now.configs.ema.has_value();
  if (m.ema && !keeps_ema) {
    notes.emplace_back("the checkpoint's EMA of the weights is not loaded: this run has no [ema] table (its "
                       "checkpoints will have no EMA; add [ema] to keep it)");
  } else if (!m.ema && keeps_ema) {
    notes.push_back(str("the checkpoint has no EMA of the weights: the EMA starts from the resumed weights of step ",
                        m.step));
  } else if (m.ema && keeps_ema) {
    note_differences(saved.ema, current.ema, notes);
  }
}

void compare_settings(const Manifest& m, const EngineState& now, std::vector<std::string>& notes) {
  const ComponentTomls saved = to_toml_texts(saved_configs(m, now));
  const ComponentTomls current = now.tomls();
  // Another optimizer is refused (check_compatibility): its keys differ, not its settings.
  if (m.optimizer.name == now.configs.optimizer.name) note_differences(saved.optimizer, current.optimizer, notes);
  note_differences(saved.scheduler, current.scheduler, notes);
  note_differences(saved.engine, current.engine, notes, is_recorded_engine_key);
  compare_ema(m, now, saved, current, notes);
  if (m.world_size != now.world_size || m.stage != now.stage)
    notes.push_back(str("resharded: saved by ", m.world_size, " rank(s) at stage ", m.stage, ", loaded by ",
                        now.world_size, " at stage ", now.stage));
}

// ---- reading this rank's slices ----

// One contiguous copy from a checkpoint unit into the staged master shard.
struct CopyOp {
  size_t src_unit = 0;
  int64_t src_begin = 0;  // element in the checkpoint unit's flat buffer
  int64_t dst_begin = 0;  // element in the rank's master shard
  int64_t numel = 0;
};

// The copies that fill this rank's owned slices, by parameter name; neighbours that are contiguous on
// both sides are merged so that an unchanged layout reads in one range per unit and file.
std::vector<CopyOp> plan_copies(const Manifest& m, const EngineState& state) {
  const auto index = index_params(m);
  std::vector<CopyOp> ops;
  for (const UnitShardLayout& unit : state.units) {
    const ElementSpan owned = unit.owned;
    for (const ParamSlot& slot : unit.layout.slots) {
      const int64_t lo = std::max(slot.offset, owned.begin);
      const int64_t hi = std::min(slot.offset + slot.numel, owned.end());
      if (lo >= hi) continue;
      const SlotRef src = index.at(slot.name);
      const CopyOp op{src.unit, src.slot->offset + (lo - slot.offset),
                      unit.in_flat.begin + (lo - owned.begin), hi - lo};
      CopyOp* last = ops.empty() ? nullptr : &ops.back();
      if (last && last->src_unit == op.src_unit && last->src_begin + last->numel == op.src_begin &&
          last->dst_begin + last->numel == op.dst_begin) {
        last->numel += op.numel;
      } else {
        ops.push_back(op);
      }
    }
  }
  return ops;
}

// The kinds this engine takes from the checkpoint: all of them, but the EMA only when the run keeps one.
std::vector<std::string> kinds_to_load(const Manifest& m, const EngineState& state) {
  std::vector<std::string> kinds;
  for (const std::string& kind : m.kinds)
    if (kind != kEmaShard || state.find_shard(kEmaShard)) kinds.push_back(kind);
  return kinds;
}

// Each loaded kind's new contents of this rank's shard (padding zero), read into fresh CPU buffers.
std::vector<NamedShard> read_staged(const std::string& dir, const Manifest& m, const EngineState& state) {
  const auto ops = plan_copies(m, state);
  ShardReader reader(dir, m);
  std::vector<NamedShard> staged;
  for (const std::string& kind : kinds_to_load(m, state)) {
    auto buffer = torch::zeros({state.shard(kMasterShard).numel()}, torch::kFloat32);
    float* base = buffer.data_ptr<float>();
    for (const CopyOp& op : ops) reader.read(kind, op.src_unit, op.src_begin, op.numel, base + op.dst_begin);
    staged.push_back({kind, std::move(buffer)});
  }
  return staged;
}

// The state the engine takes: this run's identity, layouts and configurations, the checkpoint's shards
// and counters.
EngineState loaded_state(const EngineState& current, const Manifest& m, std::vector<NamedShard> staged) {
  EngineState loaded = current;
  loaded.shards = std::move(staged);
  loaded.counters = {m.step, m.optimizer_step, m.skipped_total, m.lr, m.loss_scale_enabled, m.loss_scaler};
  return loaded;
}

// Each rank checks every size-th file (round robin), so checksums cost one read of the checkpoint
// spread over all ranks; the checks are those of `zest ckpt inspect --verify`.
void check_files(const std::string& dir, const Manifest& m, const Communicator& comm, bool hash) {
  for (int f = comm.rank(); f < m.world_size; f += comm.size()) {
    const FileStatus status = check_rank_file(dir, m, f, hash);
    ZEST_CHECK(status.ok(), status.problem(m.files[static_cast<size_t>(f)]));
  }
}

}  // namespace

Compatibility check_compatibility(const Manifest& m, const EngineState& state, const LoadRequest& request) {
  Compatibility c;
  if (m.model_name != request.model_name)
    c.errors.push_back("model name: '" + m.model_name + "' in the checkpoint, '" + request.model_name + "' now");
  for (const std::string& line : diff_config_text(m.model_config, request.model_config))
    c.errors.push_back("model config " + line);
  compare_parameters(m, state, c.errors);
  std::vector<std::string> kinds;
  for (const std::string& name : state.shard_names())
    if (name != kEmaShard) kinds.push_back(name);
  if (m.ema) kinds.emplace_back(kEmaShard);  // whether this run keeps an EMA or not (compare_ema)
  const OptimizerKind optimizer = state.configs.optimizer.name;
  if (m.optimizer.name != optimizer || m.kinds != kinds) {
    c.errors.push_back(str("optimizer: ", to_string(m.optimizer.name), " in the checkpoint, ", to_string(optimizer),
                           " now (its state cannot be converted)"));
  }
  compare_settings(m, state, c.notes);
  return c;
}

LoadedState load(StatefulEngine& engine, const LoadRequest& request) {
  Communicator& comm = engine.comm();
  const EngineState current = engine.state();
  std::string dir, text, where_note;
  if (comm.rank() == 0) {
    raise_if_any(comm, capture_error([&] {
      const CheckpointLocation where = locate_checkpoint(request.path);
      dir = where.step_dir;
      where_note = where.note;
      text = read_manifest_text(dir);
    }));
  } else {
    raise_if_any(comm, "");
  }
  dir = comm.broadcast_string(dir, 0);
  text = comm.broadcast_string(text, 0);

  Manifest manifest;
  Compatibility compat;
  raise_if_any(comm, capture_error([&] {
    manifest = parse_manifest_of(dir, text);
    compat = check_compatibility(manifest, current, request);
    if (compat.errors.empty()) return;
    std::string message = "checkpoint " + dir + " does not fit this run:";
    for (const auto& e : compat.errors) message += "\n  - " + e;
    ZEST_FAIL(message);
  }));
  raise_if_any(comm, capture_error([&] { check_files(dir, manifest, comm, request.verify_checksums); }));
  std::vector<NamedShard> staged;
  raise_if_any(comm, capture_error([&] { staged = read_staged(dir, manifest, current); }));
  engine.load_state(loaded_state(current, manifest, std::move(staged)));  // nothing above changed the engine

  if (!where_note.empty()) compat.notes.insert(compat.notes.begin(), where_note);
  if (comm.rank() == 0)
    for (const auto& note : compat.notes) std::cerr << "zest: checkpoint note: " << note << "\n";
  LoadedState loaded;
  loaded.path = dir;
  loaded.manifest_path = (std::filesystem::path(dir) / kManifestName).string();
  loaded.step = manifest.step;
  loaded.saved_world_size = manifest.world_size;
  loaded.saved_stage = manifest.stage;
  loaded.extra_json = manifest.extra_json;
  if (manifest.world_size == comm.size() && !manifest.rank_extra_json.empty())
    loaded.rank_extra_json = manifest.rank_extra_json[comm.rank()];
  loaded.notes = compat.notes;
  return loaded;
}

}  // namespace zest::checkpoint
