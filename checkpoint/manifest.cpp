// manifest.json reading and writing (see manifest.h and docs/checkpoint_format.md).
#include "checkpoint/manifest.h"

#include "checkpoint/checksum.h"
#include "checkpoint/directory.h"
#include "formats/json_field.h"
#include "checkpoint/manifest_check.h"
#include "core/check.h"
#include "core/untrusted_file.h"
#include "formats/json_text.h"
#include "engine/engine_config.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace zest::checkpoint {
namespace {

template <typename Enum, size_t N>
Enum enum_from(const JsonField& field, const Enum (&values)[N]) {
  const std::string name = field.string();
  std::string allowed;
  for (const Enum v : values) {
    if (name == to_string(v)) return v;
    allowed += std::string(allowed.empty() ? "" : ", ") + to_string(v);
  }
  field.fail("is '" + name + "', expected one of " + allowed);
}

std::string now_utc() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

// ---- writing ----

Json units_to_json(const std::vector<UnitLayout>& units) {
  Json out = Json::array();
  for (const UnitLayout& unit : units) {
    Json params = Json::array();
    for (const ParamSlot& slot : unit.slots) {
      params.push_back({{"name", slot.name}, {"aliases", slot.aliases}, {"shape", slot.shape}, {"dtype", "F32"},
                        {"offset", slot.offset}, {"numel", slot.numel}, {"decay", slot.decay}});
    }
    out.push_back({{"name", unit.name}, {"numel", unit.numel}, {"padded_numel", unit.padded_numel},
                   {"shard_numel", unit.shard_numel()}, {"params", params}});
  }
  return out;
}

Json optimizer_to_json(const Manifest& m) {
  const OptimConfig& o = m.optimizer;
  return {{"name", to_string(o.name)}, {"lr", o.lr}, {"betas", {o.beta1, o.beta2}}, {"eps", o.eps},
          {"weight_decay", o.weight_decay}, {"momentum", o.momentum}, {"nesterov", o.nesterov},
          {"no_decay", o.no_decay}, {"step_count", m.optimizer_step}};
}

Json scheduler_to_json(const Manifest& m) {
  const SchedulerConfig& s = m.scheduler;
  return {{"name", to_string(s.name)}, {"warmup_steps", s.warmup_steps}, {"decay_steps", s.decay_steps},
          {"min_lr", s.min_lr}, {"step", m.step}, {"lr", m.lr}};
}

Json ema_to_json(const EmaConfig& e) {
  return {{"decay", e.decay}, {"min_decay", e.min_decay}, {"update_every", e.update_every},
          {"start_step", e.start_step}, {"use_ema_warmup", e.use_ema_warmup}, {"inv_gamma", e.inv_gamma},
          {"power", e.power}};
}

// Caller-provided JSON must be an object; it is stored as a JSON value, not a string.
Json object_from_text(const std::string& text, const std::string& what) {
  const Json value = parse_ordered_json(text.empty() ? "{}" : text, what);
  ZEST_CHECK(value.is_object(), what, " must be a JSON object, got ", value.type_name());
  return value;
}

// The checksum covers the compact spelling of every other member, in order: whitespace does not count,
// every value (and its place) does.
uint64_t checksum_of(Json manifest) {
  manifest.erase(kManifestChecksumField);
  return xxh64_string(manifest.dump());
}

// ---- reading ----

uint64_t checksum_from(const JsonField& field) {
  const std::string text = field.string();
  try {
    return from_hex(text, field.path());
  } catch (const Error&) {
    field.fail("must be an xxh64 checksum (16 lowercase hex digits), got '" + text + "'");
  }
}

ParamSlot slot_from_json(const JsonField& j) {
  ParamSlot slot;
  slot.name = j.at("name").string();
  slot.aliases = j.at("aliases").strings();
  slot.shape = j.at("shape").integers(0);
  slot.offset = j.at("offset").integer(0);
  slot.numel = j.at("numel").integer(0);
  slot.decay = j.at("decay").boolean();
  const JsonField dtype = j.at("dtype");
  if (dtype.string() != "F32") dtype.fail("is '" + dtype.string() + "', expected 'F32' (checkpoint tensors are fp32)");
  return slot;
}

UnitLayout unit_from_json(const JsonField& j, int world_size) {
  UnitLayout unit;
  unit.name = j.at("name").string();
  unit.world_size = world_size;
  unit.numel = j.at("numel").integer(0);
  const JsonField padded = j.at("padded_numel");
  unit.padded_numel = padded.integer(0);
  if (unit.padded_numel % world_size != 0)
    padded.fail(str("is ", unit.padded_numel, ", not a multiple of world_size ", world_size));
  const JsonField shard = j.at("shard_numel");
  if (shard.integer(0) != unit.shard_numel())
    shard.fail(str("is ", shard.integer(0), ", expected padded_numel / world_size = ", unit.shard_numel()));
  for (const JsonField& p : j.at("params").items()) unit.slots.push_back(slot_from_json(p));
  return unit;
}

void optimizer_from_json(const JsonField& j, Manifest& m) {
  m.optimizer.name = enum_from(j.at("name"), kOptimizerKinds);
  m.optimizer.lr = j.at("lr").number();
  const auto betas = j.at("betas").items();
  if (betas.size() != 2) j.at("betas").fail(str("has ", betas.size(), " values, expected two [beta1, beta2]"));
  m.optimizer.beta1 = betas[0].number();
  m.optimizer.beta2 = betas[1].number();
  m.optimizer.eps = j.at("eps").number();
  m.optimizer.weight_decay = j.at("weight_decay").number();
  m.optimizer.momentum = j.at("momentum").number();
  m.optimizer.nesterov = j.at("nesterov").boolean();
  m.optimizer.no_decay = j.at("no_decay").strings();
  m.optimizer_step = j.at("step_count").integer(0);
}

void scheduler_from_json(const JsonField& j, Manifest& m) {
  constexpr ScheduleKind kinds[] = {ScheduleKind::constant, ScheduleKind::cosine, ScheduleKind::linear};
  m.scheduler.name = enum_from(j.at("name"), kinds);
  m.scheduler.warmup_steps = j.at("warmup_steps").to_int(0);
  m.scheduler.decay_steps = j.at("decay_steps").to_int(0);
  m.scheduler.min_lr = j.at("min_lr").number();
  m.lr = j.at("lr").number();
  const JsonField step = j.at("step");
  if (step.integer() != m.step) step.fail(str("is ", step.integer(), " but the manifest's step is ", m.step));
}

// The ranges are checked with the other rules (manifest_check.cpp).
EmaConfig ema_from_json(const JsonField& j) {
  EmaConfig e;
  e.enabled = true;
  e.decay = j.at("decay").number();
  e.min_decay = j.at("min_decay").number();
  e.update_every = j.at("update_every").integer();
  e.start_step = j.at("start_step").integer();
  e.use_ema_warmup = j.at("use_ema_warmup").boolean();
  e.inv_gamma = j.at("inv_gamma").number();
  e.power = j.at("power").number();
  return e;
}

void loss_scaler_from_json(const JsonField& j, Manifest& m) {
  m.loss_scale_enabled = j.at("enabled").boolean();
  const JsonField scale = j.at("scale");
  m.loss_scaler.scale = scale.number();
  if (m.loss_scaler.scale <= 0) scale.fail(str("is ", m.loss_scaler.scale, ", expected a loss scale > 0"));
  m.loss_scaler.clean_steps = j.at("clean_steps").integer(0);
  m.loss_scaler.hysteresis_left = j.at("hysteresis_left").to_int(0);
  m.loss_scaler.overflows = j.at("overflows").integer(0);
}

void ranks_from_json(const JsonField& j, Manifest& m) {
  const auto ranks = j.items();
  for (size_t r = 0; r < ranks.size(); ++r) {
    const JsonField rank = ranks[r].at("rank");
    if (rank.integer() != static_cast<int64_t>(r)) rank.fail(str("is ", rank.integer(), ", expected ", r));
    m.rank_extra_json.push_back(ranks[r].at("extra").object().dump());
  }
  if (!ranks.empty() && static_cast<int>(ranks.size()) != m.world_size)
    j.fail(str("has ", ranks.size(), " entries, expected one per rank (world_size ", m.world_size, ")"));
}

void files_from_json(const JsonField& j, Manifest& m) {
  const auto files = j.items();
  if (static_cast<int>(files.size()) != m.world_size)
    j.fail(str("lists ", files.size(), " files, expected one per rank (world_size ", m.world_size, ")"));
  for (size_t r = 0; r < files.size(); ++r) {
    FileRecord record;
    const JsonField name = files[r].at("name");
    record.name = name.string();
    if (record.name != rank_file_name(static_cast<int>(r)))
      name.fail("is '" + record.name + "', expected '" + rank_file_name(static_cast<int>(r)) + "'");
    record.bytes = static_cast<uint64_t>(files[r].at("bytes").integer(8));  // 8: a safetensors length field
    record.xxh64 = checksum_from(files[r].at("xxh64"));
    m.files.push_back(record);
  }
}

// Through formats/json_text.h's bounded reader: a manifest nested past its limit is refused, not recursed into.
Json parse_json(const std::string& text, const std::string& source) {
  try {
    return parse_ordered_json(text, source);
  } catch (const Error& e) {
    ZEST_FAIL(e.what(), " (a truncated or corrupt manifest)");
  }
}

// Format name and version first (a newer format is reported as such, not as a checksum mismatch), then
// the checksum: nothing else is read from a manifest whose bytes changed.
int check_format_and_checksum(const Json& j, const std::string& source) {
  const JsonField root(j, source);
  root.object();
  const std::string format = root.at("format").string();
  ZEST_CHECK(format == kFormatName, source, ": format is '", format, "', expected '", kFormatName,
             "' (not a zest checkpoint manifest)");
  const JsonField version_field = root.at("format_version");
  const int version = version_field.to_int();
  ZEST_CHECK(version >= kOldestFormatVersion && version <= kFormatVersion, source,
             ": unknown checkpoint format version ", version, "; this build of zest reads versions ",
             kOldestFormatVersion, " to ", kFormatVersion,
             (version > kFormatVersion ? " (written by a newer zest?)" : ""));
  // Version 1 manifests have no checksum; one that is present is always checked.
  if (version == 1 && !root.has(kManifestChecksumField)) return version;
  const uint64_t saved = checksum_from(root.at(kManifestChecksumField));
  const uint64_t actual = checksum_of(j);
  ZEST_CHECK(saved == actual, source, ": the manifest's content does not match its checksum (",
             kManifestChecksumField, " is ", to_hex(saved), ", the content hashes to ", to_hex(actual),
             "): the file is corrupt or was edited; restore it from a copy");
  return version;
}

Manifest manifest_from_json(const Json& j, const std::string& source) {
  const JsonField root(j, source);
  Manifest m;
  const JsonField model = root.at("model");
  m.model_name = model.at("name").string();
  m.model_config = model.at("config").string();
  m.config_hash = model.at("config_hash").string();
  m.step = root.at("step").integer(0);
  m.world_size = root.at("world_size").to_int(1);
  m.stage = root.at("stage").to_int();
  m.precision = root.at("precision").string();
  m.kinds = root.at("kinds").strings();
  for (const JsonField& u : root.at("units").items()) m.units.push_back(unit_from_json(u, m.world_size));
  const JsonField count = root.at("num_parameters");
  if (count.integer() != m.num_parameters())
    count.fail(str("is ", count.integer(), " but the units hold ", m.num_parameters(), " elements"));
  optimizer_from_json(root.at("optimizer"), m);
  scheduler_from_json(root.at("scheduler"), m);
  if (root.has("ema")) m.ema = ema_from_json(root.at("ema"));
  if (root.has("config")) m.config_json = root.at("config").object().dump();
  loss_scaler_from_json(root.at("loss_scaler"), m);
  m.skipped_total = root.at("skipped_total").integer(0);
  m.extra_json = root.at("extra").object().dump();
  ranks_from_json(root.at("ranks"), m);
  files_from_json(root.at("files"), m);
  if (root.has("created_utc")) m.created_utc = root.at("created_utc").string();
  return m;
}

}  // namespace

int64_t Manifest::num_parameters() const {
  int64_t n = 0;
  for (const auto& unit : units) n += unit.numel;
  return n;
}

bool Manifest::has_ema() const { return std::find(kinds.begin(), kinds.end(), kEmaShard) != kinds.end(); }

JsonDocument extra_record(const std::string& extra_json, const std::string& manifest_path) {
  JsonDocument record(parse_ordered_json(extra_json.empty() ? "{}" : extra_json, manifest_path + " (extra)"),
                      manifest_path, "extra");
  record.root().object();
  return record;
}

std::string config_hash(const std::string& model_name, const std::string& model_config) {
  return to_hex(xxh64_string(model_name + "\n" + model_config));
}

std::string to_json_text(const Manifest& m) {
  Json ranks = Json::array();
  for (size_t r = 0; r < m.rank_extra_json.size(); ++r)
    ranks.push_back({{"rank", r}, {"extra", object_from_text(m.rank_extra_json[r], "rank extra JSON")}});
  Json files = Json::array();
  for (const FileRecord& f : m.files)
    files.push_back({{"name", f.name}, {"bytes", f.bytes}, {"xxh64", to_hex(f.xxh64)}});
  const LossScalerState& s = m.loss_scaler;
  Json j = {
      {"format", kFormatName},
      {"format_version", kFormatVersion},
      {"model", {{"name", m.model_name}, {"config", m.model_config}, {"config_hash", m.config_hash}}},
      {"step", m.step},
      {"world_size", m.world_size},
      {"stage", m.stage},
      {"precision", m.precision},
      {"num_parameters", m.num_parameters()},
      {"kinds", m.kinds},
      {"units", units_to_json(m.units)},
      {"optimizer", optimizer_to_json(m)},
      {"scheduler", scheduler_to_json(m)},
  };
  if (m.ema) j["ema"] = ema_to_json(*m.ema);  // only when the run keeps one: other manifests are unchanged
  if (!m.config_json.empty()) j["config"] = object_from_text(m.config_json, "config JSON");
  j.update(Json{
      {"loss_scaler", {{"enabled", m.loss_scale_enabled}, {"scale", s.scale}, {"clean_steps", s.clean_steps},
                       {"hysteresis_left", s.hysteresis_left}, {"overflows", s.overflows}}},
      {"skipped_total", m.skipped_total},
      {"extra", object_from_text(m.extra_json, "extra JSON")},
      {"ranks", ranks},
      {"files", files},
      {"created_utc", m.created_utc.empty() ? now_utc() : m.created_utc},
  });
  j[kManifestChecksumField] = to_hex(checksum_of(j));
  return j.dump(1) + "\n";
}

Manifest parse_manifest(const std::string& text, const std::string& source) {
  const Json j = parse_json(text, source);
  const int version = check_format_and_checksum(j, source);
  Manifest m = manifest_from_json(j, source);
  m.format_version = version;
  validate_manifest(m, source);
  return m;
}

std::string read_manifest_text(const std::string& step_dir) {
  const std::string path = (std::filesystem::path(step_dir) / kManifestName).string();
  // Never blocks on a FIFO named manifest.json, nor reads a sparse file of gigabytes.
  return read_text_file(path, "checkpoint manifest", kMaxManifestBytes);
}

Manifest parse_manifest_of(const std::string& step_dir, const std::string& text) {
  const std::string source = (std::filesystem::path(step_dir) / kManifestName).string();
  Manifest m = parse_manifest(text, source);
  check_step_folder(m, step_dir, source);
  return m;
}

Manifest read_manifest(const std::string& step_dir) {
  return parse_manifest_of(step_dir, read_manifest_text(step_dir));
}

std::string with_manifest_checksum(const std::string& text, const std::string& source) {
  Json j = parse_json(text, source);
  ZEST_CHECK(j.is_object(), source, ": a manifest is a JSON object");
  j[kManifestChecksumField] = to_hex(checksum_of(j));
  return j.dump(1) + "\n";
}

void write_manifest(const std::string& step_dir, const Manifest& manifest) {
  write_file_synced((std::filesystem::path(step_dir) / kManifestName).string(), to_json_text(manifest));
}

}  // namespace zest::checkpoint
