// RunConfig: reading a run file table by table, the cross-table rules, and printing it back.
#include "train/run_config.h"

#include "core/check.h"
#include "core/config_reader.h"
#include "core/config_writer.h"
#include "models/model_memory.h"

#include <algorithm>
#include <climits>
#include <filesystem>
#include <map>

namespace zest {

namespace {

// Top-level DeepSpeed config names, with where zest keeps the setting. A misspelled or foreign section
// must fail loudly: DeepSpeed silently ignored unknown top-level keys (deepspeedai/DeepSpeed#1809).
const std::map<std::string, std::string> kTopLevelHints = {
    {"zero_optimization", "the ZeRO stage is [engine] stage"},
    {"fp16", "precision is [engine] precision = \"fp16\"; loss scaling is [engine.loss_scale]"},
    {"bf16", "precision is [engine] precision = \"bf16\""},
    {"gradient_accumulation_steps", "zest calls it [engine] accumulation_steps"},
    {"gradient_clipping", "zest calls it [engine] clip_norm"},
    {"train_micro_batch_size_per_gpu", "zest calls it [data] batch_size"},
    {"train_batch_size", "zest sets [data] batch_size per rank and micro-batch"},
    {"steps_per_print", "zest calls it [train] log_every"},
    {"lr_scheduler", "zest calls it [scheduler]"},
    {"activation_checkpointing", "zest calls it [engine] activation_checkpointing"},
    {"use_ema", "an [ema] table turns the EMA of the weights on"},
    {"tensorboard", "TensorBoard files are [log] tensorboard = true (the default)"},
};

// A config error is one line: a value it quotes back may hold a newline or other control characters
// (e.g. model.config = "a\nb"), written here as escapes.
std::string escape_control_characters(const std::string& text) {
  std::string out;
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (byte < 0x20 && c != '\t') out += str("\\x", "0123456789abcdef"[byte >> 4], "0123456789abcdef"[byte & 15]);
    else out += c;
  }
  return out;
}

// Checks that need more than one table; errors point at the key to change.
void check_across_tables(ConfigTable& root, RunConfig& c) {
  ConfigTable scheduler = root.table("scheduler");
  if (c.scheduler.min_lr > c.optimizer.lr)
    scheduler.fail("min_lr", "must be <= optimizer.lr (" + toml_float(c.scheduler.min_lr) + " > " +
                                 toml_float(c.optimizer.lr) + ")");
  if (c.scheduler.warmup_steps > c.train.max_steps)
    scheduler.fail("warmup_steps", "must be <= train.max_steps (" + std::to_string(c.train.max_steps) + ")");
  if (c.scheduler.name != ScheduleKind::constant && c.scheduler.decay_steps == 0) {
    // Decay over the rest of the run unless told otherwise.
    const int64_t rest = c.train.max_steps - c.scheduler.warmup_steps;
    if (rest <= 0)
      scheduler.fail("name", std::string("a ") + to_string(c.scheduler.name) +
                                 " schedule needs train.max_steps > warmup_steps, or an explicit decay_steps");
    c.scheduler.decay_steps = static_cast<int>(std::min<int64_t>(rest, INT32_MAX));
  }
  if (c.checkpoint.dir.empty()) c.checkpoint.dir = c.train.run_dir + "/checkpoints";
  if (c.profile.enabled() && c.profile.steps[0] > c.train.max_steps)
    root.table("profile").fail("steps", "starts after the last step (train.max_steps = " +
                                            std::to_string(c.train.max_steps) + ")");
}

}  // namespace

TrainConfig TrainConfig::from_toml(ConfigTable& table) {
  TrainConfig c;
  c.max_steps = table.get("max_steps", c.max_steps);
  c.seed = table.get("seed", c.seed);
  c.log_every = table.get("log_every", c.log_every);
  c.run_dir = table.get("run_dir", c.run_dir);
  table.reject_unknown_keys({{"steps", "zest calls it max_steps"}, {"output_dir", "zest calls it run_dir"}});

  if (c.max_steps < 1) table.fail("max_steps", "must be >= 1");
  if (c.seed < 0) table.fail("seed", "must be >= 0");
  if (c.log_every < 1) table.fail("log_every", "must be >= 1");
  if (c.run_dir.empty()) table.fail("run_dir", "must not be empty");
  return c;
}

void to_toml(const TrainConfig& c, ConfigWriter& out) {
  ConfigWriter& t = out.table("train", "the training loop");
  t.set("max_steps", c.max_steps, "optimizer steps");
  t.set("seed", c.seed, "seed of initialisation, data order and dropout");
  t.set("log_every", c.log_every, "optimizer steps between log lines");
  t.set("run_dir", c.run_dir, "logs, resolved config, default checkpoint folder");
}

RunConfig run_config_from_toml(ConfigTable& root) {
  RunConfig c;
  c.source = root.file();
  // Table order = the order errors are found in: model and data first, as a run is about them.
  ConfigTable model = root.table("model");
  ConfigTable data = root.table("data");
  ConfigTable engine = root.table("engine");
  ConfigTable optimizer = root.table("optimizer");
  ConfigTable scheduler = root.table("scheduler");
  const bool has_ema = root.has("ema");
  ConfigTable ema = root.table("ema");
  ConfigTable train = root.table("train");
  ConfigTable checkpoint = root.table("checkpoint");
  ConfigTable sample = root.table("sample");
  ConfigTable log = root.table("log");
  ConfigTable profile = root.table("profile");
  ConfigTable loss = root.table("loss");
  const bool has_lora = root.has("lora");
  ConfigTable lora = root.table("lora");
  root.reject_unknown_keys(kTopLevelHints);  // a misspelled section first: its keys would look missing

  c.model = ModelSelection::from_toml(model);
  c.data = DataConfig::from_toml(data);
  c.engine = EngineConfig::from_toml(engine);
  check_supported_here(engine, c.engine);
  c.optimizer = OptimConfig::from_toml(optimizer);
  c.scheduler = SchedulerConfig::from_toml(scheduler);
  c.ema = EmaConfig::from_toml(ema, has_ema);
  c.train = TrainConfig::from_toml(train);
  c.checkpoint = CheckpointConfig::from_toml(checkpoint);
  c.sample = SampleConfig::from_toml(sample);
  c.log = LogConfig::from_toml(log);
  c.profile = ProfileConfig::from_toml(profile);
  c.loss = LossConfig::from_toml(loss);
  c.lora = LoraConfig::from_toml(lora, has_lora);
  check_across_tables(root, c);
  return c;
}

RunConfig parse_run_config(const std::string& path, const std::vector<std::string>& overrides) {
  // Checked here: a folder would otherwise read as an empty document ("[model]: needs name"), and a
  // device such as /dev/zero would be read forever. A pipe (`<(...)`) is fine.
  std::error_code error;
  const auto status = std::filesystem::status(path, error);
  if (!std::filesystem::exists(status)) throw Error(path + ": run file not found");
  if (std::filesystem::is_directory(status)) throw Error(path + ": is a folder, not a run file (TOML)");
  if (!std::filesystem::is_regular_file(status) && !std::filesystem::is_fifo(status))
    throw Error(path + ": is not a regular file, not a run file (TOML)");
  try {
    ConfigTable root = ConfigTable::parse_file(path);
    root.apply_overrides(overrides);
    return run_config_from_toml(root);
  } catch (const Error& e) {
    throw Error(escape_control_characters(e.what()));
  } catch (const std::exception& e) {
    // E.g. a std::filesystem check of a path too long for the file system: still this file's error.
    throw Error(escape_control_characters(path + ": " + e.what()));
  }
}

ResolvedModel resolve_run_model(const RunConfig& config) { return resolve_model(config.model); }

void check_run_model(const RunConfig& config) {
  const ResolvedModel model = resolve_run_model(config);
  ConfigTable counted = model_config_table(model);  // counting builds nothing (meta tensors)
  check_model_fits_host(*model.family, counted);
}

std::string to_toml(const RunConfig& c) {
  ConfigWriter out;
  to_toml(c.model, out);
  to_toml(c.data, out);
  to_toml(c.engine, out);
  to_toml(c.optimizer, out);
  to_toml(c.scheduler, out);
  to_toml(c.ema, out);
  to_toml(c.train, out);
  to_toml(c.checkpoint, out);
  to_toml(c.sample, out);
  to_toml(c.log, out);
  to_toml(c.profile, out);
  to_toml(c.loss, out);
  to_toml(c.lora, out);
  std::string header = "# zest run configuration, resolved (every default written out)";
  if (!c.source.empty()) header += "\n# from " + c.source;
  return header + "\n\n" + out.str();
}

}  // namespace zest
