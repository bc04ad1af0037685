// RunConfig: the whole run file of `zest train` ([model], [data], [engine], [optimizer], [scheduler],
// [ema], [train], [checkpoint], [sample], [loss], [lora], [log], [profile]), layered defaults < file < --set overrides, with the cross-table checks.
#pragma once

#include "checkpoint/checkpoint_config.h"
#include "data/data_config.h"
#include "engine/engine_config.h"
#include "models/loss_config.h"
#include "models/common/lora.h"
#include "models/model_resolve.h"
#include "models/model_selection.h"
#include "optim/ema.h"
#include "optim/optim_config.h"
#include "profiling/step_trace.h"
#include "train/tensorboard_log.h"
#include "pipelines/sample_config.h"

#include <cstdint>
#include <string>
#include <vector>

namespace zest {

class ConfigTable;   // core/config_reader.h
class ConfigWriter;  // core/config_writer.h
template <typename C>
class FieldTable;  // core/field_table.h

// The [train] table: how long, which seed, how often to log, where the run's outputs go.
struct TrainConfig {
  int64_t max_steps = 1000;        // optimizer steps
  int64_t seed = 0;                // seeds parameter init, data order and dropout (rank-aware)
  int log_every = 10;              // optimizer steps between log lines
  std::string run_dir = "runs/zest";  // logs, the resolved config and (by default) checkpoints

  static TrainConfig from_toml(ConfigTable& table);
};

void to_toml(const TrainConfig& config, ConfigWriter& out);
const FieldTable<TrainConfig>& train_fields();  // the [train] table (core/field_table.h)

struct RunConfig {
  std::string source;  // the run file it was read from ("" when built in code)
  ModelSelection model;
  DataConfig data;
  EngineConfig engine;
  OptimConfig optimizer;
  SchedulerConfig scheduler;
  EmaConfig ema;
  TrainConfig train;
  CheckpointConfig checkpoint;
  SampleConfig sample;  // [sample]: validation samples (pipelines/sample_config.h)
  LogConfig log;        // [log]: TensorBoard files (train/tensorboard_log.h)
  ProfileConfig profile;  // [profile]: step traces (profiling/step_trace.h)
  LossConfig loss;      // [loss]: the training objective's options (models/loss_config.h)
  LoraConfig lora;      // [lora]: train low-rank adapters on a frozen base (models/common/lora.h)
};

// Reads a run file (an error naming it when it is missing or not a regular file; every error is one
// line, control characters in quoted values escaped), applies `overrides` ("section.key=value", TOML values) on top, validates every
// table and the cross-table rules, and resolves derived defaults (checkpoint.dir, scheduler.decay_steps).
RunConfig parse_run_config(const std::string& path, const std::vector<std::string>& overrides = {});
// The same from an already parsed (and overridden) document, e.g. ConfigTable::parse_string in tests.
RunConfig run_config_from_toml(ConfigTable& root);

// The run's model. model.config is already usable as it stands: reading the run file resolved a
// relative path against the run file's folder, so it must not be resolved against it a second time.
ResolvedModel resolve_run_model(const RunConfig& config);

// What `zest train` refuses about the model before building it, without building it: a model
// configuration (file or pretrained folder) that does not read, a field outside its range, weights
// that cannot fit the host. `zest config check` runs it, so that it passes only what train accepts.
void check_run_model(const RunConfig& config);

// The resolved config as TOML, every default written out, each key with its one-line doc.
std::string to_toml(const RunConfig& config);

// Sets the process's kernel switches from [engine.kernels] (core/kernel_switches.h), once, at the start of
// `zest train` and `zest bench`: a set environment variable still wins, and `print` (rank 0) says so in one
// line each on stderr. With CUDA also the attention backend. Also the training products' precision
// ([engine] matmul; fp8 on a GPU without fp8 tensor cores is an error naming the key). Returns the switches'
// values in force.
KernelsConfig apply_run_kernels(const RunConfig& config, bool print);

// The run file: every table above, nested in run-file order (core/field_table.h). From it come reading,
// to_toml, `zest config diff`, and the key tables of docs/config_reference.md (config_reference_markdown).
const FieldTable<RunConfig>& run_fields();

// The key table of docs/config_reference.md, between its kReferenceBegin and kReferenceEnd lines.
std::string config_reference_markdown();
inline constexpr const char* kReferenceBegin = "<!-- keys: generated from the field tables by `zest config reference`; edit the tables, not this -->";
inline constexpr const char* kReferenceEnd = "<!-- end of generated keys -->";
// `docs`' text with the part between those lines replaced by config_reference_markdown(); refused when the
// lines are missing.
std::string with_config_reference(const std::string& docs);

}  // namespace zest
