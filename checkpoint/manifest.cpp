// manifest.json reading and writing (see manifest.h and docs/checkpoint_format.md).
#include "checkpoint/manifest.h"

#include "checkpoint/checksum.h"
#include "checkpoint/directory.h"
#include "core/check.h"
#include "engine/engine_config.h"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace zest::checkpoint {
namespace {

using Json = nlohmann::ordered_json;

// A required field of `object`, converted to T; errors name the manifest, the path and the type.
template <typename T>
T field(const Json& object, const std::string& key, const std::string& where) {
  ZEST_CHECK(object.is_object() && object.contains(key), where, ": missing field '", key, "'");
  try {
    return object.at(key).get<T>();
  } catch (const Json::exception& e) {
    ZEST_FAIL(where, ": field '", key, "' has the wrong type (", object.at(key).type_name(), "): ", e.what());
  }
}

template <typename Enum, size_t N>
Enum enum_from(const std::string& name, const Enum (&values)[N], const std::string& where) {
  std::string allowed;
  for (const Enum v : values) {
    if (name == to_string(v)) return v;
    allowed += std::string(allowed.empty() ? "" : ", ") + to_string(v);
  }
  ZEST_FAIL(where, ": unknown value '", name, "' (expected one of ", allowed, ")");
}

std::string now_utc() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

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

ParamSlot slot_from_json(const Json& j, const std::string& where) {
  ParamSlot slot;
  slot.name = field<std::string>(j, "name", where);
  const std::string at = where + " param '" + slot.name + "'";
  slot.aliases = field<std::vector<std::string>>(j, "aliases", at);
  slot.shape = field<std::vector<int64_t>>(j, "shape", at);
  slot.offset = field<int64_t>(j, "offset", at);
  slot.numel = field<int64_t>(j, "numel", at);
  slot.decay = field<bool>(j, "decay", at);
  const auto dtype = field<std::string>(j, "dtype", at);
  ZEST_CHECK(dtype == "F32", at, ": dtype '", dtype, "' (checkpoint tensors are F32)");
  int64_t product = 1;
  for (const int64_t d : slot.shape) product *= d;
  ZEST_CHECK(product == slot.numel, at, ": numel ", slot.numel, " differs from the shape's ", product);
  return slot;
}

UnitLayout unit_from_json(const Json& j, int world_size, const std::string& where) {
  UnitLayout unit;
  unit.name = field<std::string>(j, "name", where);
  const std::string at = where + ": unit '" + unit.name + "'";
  unit.world_size = world_size;
  unit.numel = field<int64_t>(j, "numel", at);
  unit.padded_numel = field<int64_t>(j, "padded_numel", at);
  ZEST_CHECK(unit.padded_numel >= unit.numel && unit.padded_numel % world_size == 0, at, ": padded_numel ",
             unit.padded_numel, " must be >= numel ", unit.numel, " and divisible by world_size ", world_size);
  ZEST_CHECK(field<int64_t>(j, "shard_numel", at) == unit.shard_numel(), at, ": shard_numel is not padded_numel / "
             "world_size");
  for (const Json& p : field<Json>(j, "params", at)) {
    unit.slots.push_back(slot_from_json(p, at));
    const ParamSlot& slot = unit.slots.back();
    ZEST_CHECK(slot.offset >= 0 && slot.offset + slot.numel <= unit.numel, at, ": param '", slot.name,
               "' [", slot.offset, ", ", slot.offset + slot.numel, ") lies outside the unit's ", unit.numel,
               " elements");
  }
  return unit;
}

Json optimizer_to_json(const Manifest& m) {
  const OptimConfig& o = m.optimizer;
  return {{"name", to_string(o.name)}, {"lr", o.lr}, {"betas", {o.beta1, o.beta2}}, {"eps", o.eps},
          {"weight_decay", o.weight_decay}, {"momentum", o.momentum}, {"nesterov", o.nesterov},
          {"no_decay", o.no_decay}, {"step_count", m.optimizer_step}};
}

void optimizer_from_json(const Json& j, Manifest& m, const std::string& where) {
  const std::string at = where + ": optimizer";
  constexpr OptimizerKind kinds[] = {OptimizerKind::adamw, OptimizerKind::sgd};
  m.optimizer.name = enum_from(field<std::string>(j, "name", at), kinds, at + ".name");
  m.optimizer.lr = field<double>(j, "lr", at);
  const auto betas = field<std::vector<double>>(j, "betas", at);
  ZEST_CHECK(betas.size() == 2, at, ": betas must have two values");
  m.optimizer.beta1 = betas[0];
  m.optimizer.beta2 = betas[1];
  m.optimizer.eps = field<double>(j, "eps", at);
  m.optimizer.weight_decay = field<double>(j, "weight_decay", at);
  m.optimizer.momentum = field<double>(j, "momentum", at);
  m.optimizer.nesterov = field<bool>(j, "nesterov", at);
  m.optimizer.no_decay = field<std::vector<std::string>>(j, "no_decay", at);
  m.optimizer_step = field<int64_t>(j, "step_count", at);
}

Json scheduler_to_json(const Manifest& m) {
  const SchedulerConfig& s = m.scheduler;
  return {{"name", to_string(s.name)}, {"warmup_steps", s.warmup_steps}, {"decay_steps", s.decay_steps},
          {"min_lr", s.min_lr}, {"step", m.step}, {"lr", m.lr}};
}

void scheduler_from_json(const Json& j, Manifest& m, const std::string& where) {
  const std::string at = where + ": scheduler";
  constexpr ScheduleKind kinds[] = {ScheduleKind::constant, ScheduleKind::cosine, ScheduleKind::linear};
  m.scheduler.name = enum_from(field<std::string>(j, "name", at), kinds, at + ".name");
  m.scheduler.warmup_steps = field<int>(j, "warmup_steps", at);
  m.scheduler.decay_steps = field<int>(j, "decay_steps", at);
  m.scheduler.min_lr = field<double>(j, "min_lr", at);
  m.lr = field<double>(j, "lr", at);
}

// Caller-provided JSON must be an object; it is stored as a JSON value, not a string.
Json object_from_text(const std::string& text, const std::string& what) {
  Json value;
  try {
    value = Json::parse(text.empty() ? "{}" : text);
  } catch (const Json::exception& e) {
    ZEST_FAIL(what, " is not valid JSON: ", e.what());
  }
  ZEST_CHECK(value.is_object(), what, " must be a JSON object, got ", value.type_name());
  return value;
}

Json parse_json(const std::string& text, const std::string& source) {
  try {
    return Json::parse(text);
  } catch (const Json::exception& e) {
    ZEST_FAIL(source, ": not valid JSON (truncated or corrupt manifest): ", e.what());
  }
}

void check_format(const Json& j, const std::string& source) {
  ZEST_CHECK(j.is_object(), source, ": a manifest is a JSON object");
  const auto format = field<std::string>(j, "format", source);
  ZEST_CHECK(format == kFormatName, source, ": format is '", format, "', expected '", kFormatName, "'");
  const auto version = field<int>(j, "format_version", source);
  ZEST_CHECK(version == kFormatVersion, source, ": unknown checkpoint format version ", version,
             "; this build of zest reads version ", kFormatVersion, " only (written by a newer zest?)");
}

void files_from_json(const Json& j, Manifest& m, const std::string& source) {
  for (const Json& f : field<Json>(j, "files", source)) {
    FileRecord record;
    record.name = field<std::string>(f, "name", source + ": files[]");
    record.bytes = field<uint64_t>(f, "bytes", source + ": files[" + record.name + "]");
    record.xxh64 = from_hex(field<std::string>(f, "xxh64", source + ": files[" + record.name + "]"),
                            source + ": files[" + record.name + "].xxh64");
    m.files.push_back(record);
  }
  ZEST_CHECK(static_cast<int>(m.files.size()) == m.world_size, source, ": lists ", m.files.size(),
             " files for world_size ", m.world_size);
  for (int r = 0; r < m.world_size; ++r)
    ZEST_CHECK(m.files[r].name == rank_file_name(r), source, ": files[", r, "] is '", m.files[r].name,
               "', expected '", rank_file_name(r), "'");
}

}  // namespace

int64_t Manifest::num_parameters() const {
  int64_t n = 0;
  for (const auto& unit : units) n += unit.numel;
  return n;
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
      {"format_version", m.format_version},
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
      {"loss_scaler", {{"enabled", m.loss_scale_enabled}, {"scale", s.scale}, {"clean_steps", s.clean_steps},
                       {"hysteresis_left", s.hysteresis_left}, {"overflows", s.overflows}}},
      {"skipped_total", m.skipped_total},
      {"extra", object_from_text(m.extra_json, "extra JSON")},
      {"ranks", ranks},
      {"files", files},
      {"created_utc", m.created_utc.empty() ? now_utc() : m.created_utc},
  };
  return j.dump(1) + "\n";
}

Manifest parse_manifest(const std::string& text, const std::string& source) {
  const Json j = parse_json(text, source);
  check_format(j, source);
  Manifest m;
  const Json model = field<Json>(j, "model", source);
  m.model_name = field<std::string>(model, "name", source + ": model");
  m.model_config = field<std::string>(model, "config", source + ": model");
  m.config_hash = field<std::string>(model, "config_hash", source + ": model");
  m.step = field<int64_t>(j, "step", source);
  m.world_size = field<int>(j, "world_size", source);
  ZEST_CHECK(m.world_size >= 1, source, ": world_size ", m.world_size, " must be >= 1");
  m.stage = field<int>(j, "stage", source);
  m.precision = field<std::string>(j, "precision", source);
  m.kinds = field<std::vector<std::string>>(j, "kinds", source);
  ZEST_CHECK(!m.kinds.empty() && m.kinds.front() == "master", source, ": kinds must start with \"master\"");
  for (const Json& u : field<Json>(j, "units", source)) m.units.push_back(unit_from_json(u, m.world_size, source));
  optimizer_from_json(field<Json>(j, "optimizer", source), m, source);
  scheduler_from_json(field<Json>(j, "scheduler", source), m, source);
  const Json scaler = field<Json>(j, "loss_scaler", source);
  m.loss_scale_enabled = field<bool>(scaler, "enabled", source + ": loss_scaler");
  m.loss_scaler.scale = field<double>(scaler, "scale", source + ": loss_scaler");
  m.loss_scaler.clean_steps = field<int64_t>(scaler, "clean_steps", source + ": loss_scaler");
  m.loss_scaler.hysteresis_left = field<int>(scaler, "hysteresis_left", source + ": loss_scaler");
  m.loss_scaler.overflows = field<int64_t>(scaler, "overflows", source + ": loss_scaler");
  m.skipped_total = field<int64_t>(j, "skipped_total", source);
  m.extra_json = field<Json>(j, "extra", source).dump();
  for (const Json& r : field<Json>(j, "ranks", source))
    m.rank_extra_json.push_back(field<Json>(r, "extra", source).dump());
  ZEST_CHECK(m.rank_extra_json.empty() || static_cast<int>(m.rank_extra_json.size()) == m.world_size, source,
             ": 'ranks' has ", m.rank_extra_json.size(), " entries for world_size ", m.world_size);
  files_from_json(j, m, source);
  m.created_utc = j.value("created_utc", "");
  return m;
}

std::string read_manifest_text(const std::string& step_dir) {
  const std::string path = (std::filesystem::path(step_dir) / kManifestName).string();
  std::ifstream in(path, std::ios::binary);
  ZEST_CHECK(in.good(), path, ": cannot open the checkpoint manifest: ", std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

Manifest read_manifest(const std::string& step_dir) {
  return parse_manifest(read_manifest_text(step_dir),
                        (std::filesystem::path(step_dir) / kManifestName).string());
}

void write_manifest(const std::string& step_dir, const Manifest& manifest) {
  write_file_synced((std::filesystem::path(step_dir) / kManifestName).string(), to_json_text(manifest));
}

}  // namespace zest::checkpoint
