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

void compare_parameters(const Manifest& m, Engine& engine, std::vector<std::string>& errors) {
  const auto index = index_params(m);
  std::set<std::string> used;
  std::vector<std::string> missing, shapes;
  for (const Unit& unit : engine.units()) {
    for (const ParamSlot& slot : unit.layout().slots) {
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

template <typename T>
void note_if_differs(std::vector<std::string>& notes, const std::string& key, const T& saved, const T& now) {
  if (saved != now)
    notes.push_back(str(key, ": ", saved, " in the checkpoint, ", now, " now (the run's value applies)"));
}

// A checkpoint's EMA and the run's [ema] need not agree: a saved EMA without [ema] is left unread, an
// [ema] without a saved one starts from the resumed weights (apply_state), and settings that differ
// take the run's values. Each case is a note.
void compare_ema(const Manifest& m, Engine& engine, std::vector<std::string>& notes) {
  const ShardedEma* ema = engine.ema();
  if (m.ema && !ema) {
    notes.emplace_back("the checkpoint's EMA of the weights is not loaded: this run has no [ema] table (its "
                       "checkpoints will have no EMA; add [ema] to keep it)");
  } else if (!m.ema && ema) {
    notes.push_back(str("the checkpoint has no EMA of the weights: the EMA starts from the resumed weights of step ",
                        m.step));
  } else if (m.ema && ema) {
    const EmaConfig& a = *m.ema;
    const EmaConfig& b = ema->config();
    note_if_differs(notes, "ema.decay", a.decay, b.decay);
    note_if_differs(notes, "ema.min_decay", a.min_decay, b.min_decay);
    note_if_differs(notes, "ema.update_every", a.update_every, b.update_every);
    note_if_differs(notes, "ema.start_step", a.start_step, b.start_step);
    note_if_differs(notes, "ema.use_ema_warmup", a.use_ema_warmup, b.use_ema_warmup);
    note_if_differs(notes, "ema.inv_gamma", a.inv_gamma, b.inv_gamma);
    note_if_differs(notes, "ema.power", a.power, b.power);
  }
}

void compare_hyper_parameters(const Manifest& m, Engine& engine, std::vector<std::string>& notes) {
  const OptimConfig& a = m.optimizer;
  const OptimConfig& b = engine.optimizer().config();
  note_if_differs(notes, "optimizer.lr", a.lr, b.lr);
  note_if_differs(notes, "optimizer.beta1", a.beta1, b.beta1);
  note_if_differs(notes, "optimizer.beta2", a.beta2, b.beta2);
  note_if_differs(notes, "optimizer.eps", a.eps, b.eps);
  note_if_differs(notes, "optimizer.weight_decay", a.weight_decay, b.weight_decay);
  note_if_differs(notes, "optimizer.momentum", a.momentum, b.momentum);
  note_if_differs(notes, "optimizer.nesterov", a.nesterov, b.nesterov);
  const SchedulerConfig& s = m.scheduler;
  const SchedulerConfig& t = engine.schedule_config();
  note_if_differs(notes, "scheduler.name", std::string(to_string(s.name)), std::string(to_string(t.name)));
  note_if_differs(notes, "scheduler.warmup_steps", s.warmup_steps, t.warmup_steps);
  note_if_differs(notes, "scheduler.decay_steps", s.decay_steps, t.decay_steps);
  note_if_differs(notes, "scheduler.min_lr", s.min_lr, t.min_lr);
  note_if_differs(notes, "engine.precision", m.precision, std::string(to_string(engine.config().precision)));
  compare_ema(m, engine, notes);
  if (m.world_size != engine.comm().size() || m.stage != engine.config().stage)
    notes.push_back(str("resharded: saved by ", m.world_size, " rank(s) at stage ", m.stage, ", loaded by ",
                        engine.comm().size(), " at stage ", engine.config().stage));
}

// One contiguous copy from a checkpoint unit into the staged master shard.
struct CopyOp {
  size_t src_unit = 0;
  int64_t src_begin = 0;  // element in the checkpoint unit's flat buffer
  int64_t dst_begin = 0;  // element in the rank's master shard
  int64_t numel = 0;
};

// The copies that fill this rank's owned slices, by parameter name; neighbours that are contiguous on
// both sides are merged so that an unchanged layout reads in one range per unit and file.
std::vector<CopyOp> plan_copies(const Manifest& m, Engine& engine) {
  const auto index = index_params(m);
  std::vector<CopyOp> ops;
  for (size_t u = 0; u < engine.units().size(); ++u) {
    const Unit& unit = engine.units()[u];
    const ElementSpan owned = unit.shard_span();
    for (const ParamSlot& slot : unit.layout().slots) {
      const int64_t lo = std::max(slot.offset, owned.begin);
      const int64_t hi = std::min(slot.offset + slot.numel, owned.end());
      if (lo >= hi) continue;
      const SlotRef src = index.at(slot.name);
      const CopyOp op{src.unit, src.slot->offset + (lo - slot.offset),
                      engine.master_span(u).begin + (lo - owned.begin), hi - lo};
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
std::vector<std::string> kinds_to_load(const Manifest& m, Engine& engine) {
  std::vector<std::string> kinds;
  for (const std::string& kind : m.kinds)
    if (kind != kEmaKind || engine.ema()) kinds.push_back(kind);
  return kinds;
}

// Each loaded kind's new contents of this rank's shard (padding zero), read into fresh CPU buffers.
std::map<std::string, torch::Tensor> read_staged(const std::string& dir, const Manifest& m, Engine& engine) {
  const auto ops = plan_copies(m, engine);
  ShardReader reader(dir, m);
  std::map<std::string, torch::Tensor> staged;
  for (const std::string& kind : kinds_to_load(m, engine)) {
    auto buffer = torch::zeros({engine.master_shard().numel()}, torch::kFloat32);
    float* base = buffer.data_ptr<float>();
    for (const CopyOp& op : ops) reader.read(kind, op.src_unit, op.src_begin, op.numel, base + op.dst_begin);
    staged.emplace(kind, std::move(buffer));
  }
  return staged;
}

void apply_state(Engine& engine, const Manifest& m, const std::map<std::string, torch::Tensor>& staged) {
  torch::NoGradGuard no_grad;
  engine.master_shard().copy_(staged.at(kMasterKind));
  for (const auto& [name, tensor] : engine.optimizer().state_tensors()) tensor.copy_(staged.at(name));
  if (ShardedEma* ema = engine.ema()) {  // a checkpoint without one: the EMA restarts from these weights
    const auto saved = staged.find(kEmaKind);
    ema->load_shard(saved != staged.end() ? saved->second : engine.master_shard());
  }
  engine.optimizer().set_step_count(m.optimizer_step);
  engine.set_step_count(m.step);
  engine.set_skipped_total(m.skipped_total);
  if (engine.loss_scaler().enabled() && m.loss_scale_enabled) engine.loss_scaler().load_state(m.loss_scaler);
  engine.refresh_params_from_master();
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

Compatibility check_compatibility(const Manifest& m, Engine& engine, const LoadRequest& request) {
  Compatibility c;
  if (m.model_name != request.model_name)
    c.errors.push_back("model name: '" + m.model_name + "' in the checkpoint, '" + request.model_name + "' now");
  for (const std::string& line : diff_config_text(m.model_config, request.model_config))
    c.errors.push_back("model config " + line);
  compare_parameters(m, engine, c.errors);
  std::vector<std::string> kinds = {kMasterKind};
  for (const auto& [name, tensor] : engine.optimizer().state_tensors()) kinds.push_back(name);
  if (m.ema) kinds.emplace_back(kEmaKind);  // whether this run keeps an EMA or not (compare_ema)
  if (m.optimizer.name != engine.optimizer().config().name || m.kinds != kinds) {
    c.errors.push_back(str("optimizer: ", to_string(m.optimizer.name), " in the checkpoint, ",
                           to_string(engine.optimizer().config().name), " now (its state cannot be converted)"));
  }
  compare_hyper_parameters(m, engine, c.notes);
  return c;
}

LoadedState load(Engine& engine, const LoadRequest& request) {
  Communicator& comm = engine.comm();
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
    compat = check_compatibility(manifest, engine, request);
    if (compat.errors.empty()) return;
    std::string message = "checkpoint " + dir + " does not fit this run:";
    for (const auto& e : compat.errors) message += "\n  - " + e;
    ZEST_FAIL(message);
  }));
  raise_if_any(comm, capture_error([&] { check_files(dir, manifest, comm, request.verify_checksums); }));
  std::map<std::string, torch::Tensor> staged;
  raise_if_any(comm, capture_error([&] { staged = read_staged(dir, manifest, engine); }));
  apply_state(engine, manifest, staged);  // nothing above changed the engine

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
