// Manifest: everything a checkpoint folder says about itself besides the tensor bytes (manifest.json):
// format version, model identity, step, world size, stage, precision, every unit's parameter layout,
// optimizer, loss scaler, LR schedule, the EMA's settings when the run keeps one, caller state (data
// position, RNG per rank), the checksum of every rank file and (format 2) a checksum of the manifest
// itself. docs/checkpoint_format.md is the field-by-field reference.
#pragma once

#include "engine/engine_state.h"
#include "engine/loss_scaler.h"
#include "engine/unit_layout.h"
#include "optim/ema.h"
#include "optim/optim_config.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace zest {
class JsonDocument;  // formats/json_field.h
}

namespace zest::checkpoint {

inline constexpr const char* kFormatName = "zest-checkpoint";
inline constexpr int kFormatVersion = 2;        // what this build writes
inline constexpr int kOldestFormatVersion = 1;  // version 1: no manifest checksum; otherwise read alike
inline constexpr const char* kManifestChecksumField = "manifest_xxh64";

struct FileRecord {
  std::string name;    // relative to the step folder, e.g. rank_00003.safetensors
  uint64_t bytes = 0;
  uint64_t xxh64 = 0;  // of the whole file
};

struct Manifest {
  int format_version = kFormatVersion;  // as read (1 or 2); writing always writes kFormatVersion
  std::string model_name;
  std::string model_config;  // the model's configuration text (TOML), compared on load
  std::string config_hash;   // xxh64 hex of model_name + '\n' + model_config
  int64_t step = 0;          // optimizer updates applied (Engine::step_count)
  int world_size = 1;
  int stage = 0;
  std::string precision;     // compute dtype of the run ("fp32", "bf16", "fp16"); tensors are fp32
  // One layout per unit, laid out for world_size: rank r's file holds [r·S, (r+1)·S) of each unit.
  std::vector<UnitLayout> units;
  // Tensor kinds in every rank file, "<kind>.<unit>": the names of the engine's flat shards (NamedShard):
  // kMasterShard, the optimizer's state names, then kEmaShard when the run keeps an EMA of the weights.
  std::vector<std::string> kinds;
  std::optional<EmaConfig> ema;  // the EMA's settings; present exactly when kinds ends with "ema"
  // The engine's settings as its field table records them (core/field_table.h), [engine.kernels] included:
  // {"engine": {"stage": 2, ..., "kernels": {...}}}, a JSON object text; informational, "" where a manifest
  // written before it has none.
  std::string config_json;

  OptimConfig optimizer;
  int64_t optimizer_step = 0;  // the optimizer's own update count (Adam bias correction)
  SchedulerConfig scheduler;
  double lr = 0.0;             // learning rate of the next update
  bool loss_scale_enabled = false;
  LossScalerState loss_scaler;
  int64_t skipped_total = 0;   // steps skipped for non-finite gradients so far

  std::string extra_json = "{}";             // caller's JSON object (data position, ...)
  std::vector<std::string> rank_extra_json;  // per rank: the caller's JSON object (RNG state, ...)
  std::vector<FileRecord> files;             // one per rank, in rank order
  std::string created_utc;                   // ISO 8601, informational only

  int64_t num_parameters() const;  // Σ unit numel (tied parameters counted once)
  bool has_ema() const;            // kinds lists "ema"
};

// The caller's record saved with a checkpoint (Manifest::extra_json, LoadedState::extra_json) as a document
// to read with JsonField (formats/json_field.h): its errors name `manifest_path` (DIR/manifest.json) and the
// field, "extra.data.epoch". Text that is not a JSON object is refused the same way.
JsonDocument extra_record(const std::string& extra_json, const std::string& manifest_path);

std::string config_hash(const std::string& model_name, const std::string& model_config);
// The tensor name of one unit's slice of a kind in a rank file.
inline std::string tensor_name(const std::string& kind, const std::string& unit) { return kind + "." + unit; }

// Pretty-printed, with format_version = kFormatVersion and the manifest's own checksum as last field.
std::string to_json_text(const Manifest& manifest);
// Parses and checks a manifest: format name, version (an unknown one is refused with the versions this
// build reads), the manifest checksum, every field's presence and type, then validate_manifest()
// (manifest_check.h). `source` names the file in errors. Every reader (load, merge, inspect) goes
// through here, so they accept and refuse the same manifests.
Manifest parse_manifest(const std::string& text, const std::string& source);
std::string read_manifest_text(const std::string& step_dir);
// parse_manifest of step_dir/manifest.json, plus: a folder named step_N must hold the manifest of step N.
Manifest read_manifest(const std::string& step_dir);
// The same checks for a manifest text read elsewhere (load: rank 0 reads, every rank parses).
Manifest parse_manifest_of(const std::string& step_dir, const std::string& text);
// The manifest text with its checksum recomputed (for tools and tests that edit a manifest on purpose).
std::string with_manifest_checksum(const std::string& text, const std::string& source);
// Writes manifest.json into `step_dir` and fsyncs it.
void write_manifest(const std::string& step_dir, const Manifest& manifest);

}  // namespace zest::checkpoint
