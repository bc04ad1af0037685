// RunConfig: reading a run file table by table, the cross-table rules, and printing it back.
#include "train/run_config.h"

#include "core/check.h"
#include "core/config_reader.h"
#include "core/config_writer.h"
#include "core/field_table.h"
#include "kernels/matmul_precision.h"
#ifdef ZEST_WITH_CUDA
#include "kernels/fp8_product.h"  // fp8_products_unavailable_here (CUDA builds only)
#endif
#include "models/model_memory.h"

#include <algorithm>
#include <climits>
#include <filesystem>
#include <iostream>
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

const FieldTable<TrainConfig>& train_fields() {
  static const FieldTable<TrainConfig> table = [] {
    using C = TrainConfig;
    FieldTable<C> t("train", "the training loop", {{"steps", "zest calls it max_steps"}, {"output_dir", "zest calls it run_dir"}});
    t.integer("max_steps", &C::max_steps, "optimizer steps").at_least(1, "must be >= 1");
    t.integer("seed", &C::seed, "seed of initialisation, data order and dropout").at_least(0, "must be >= 0");
    t.integer("log_every", &C::log_every, "optimizer steps between log lines")
        .at_least(1, "must be >= 1")
        .reference("optimizer steps between log lines (see \"Progress and metrics.jsonl\" below)");
    t.text("run_dir", &C::run_dir, "logs, resolved config, default checkpoint folder")
        .check_value([](const std::string& dir) { return !dir.empty(); }, "must not be empty")
        .reference("logs, the resolved config, and the default checkpoint folder");
    return t;
  }();
  return table;
}

TrainConfig TrainConfig::from_toml(ConfigTable& table) { return train_fields().read(table); }

void to_toml(const TrainConfig& c, ConfigWriter& out) { train_fields().write(c, out); }

const FieldTable<RunConfig>& run_fields() {
  static const FieldTable<RunConfig> table = [] {
    using C = RunConfig;
    // Table order = the order errors are found in: model and data first, as a run is about them.
    FieldTable<C> t("", "", kTopLevelHints);
    t.nested("model", &C::model, model_fields());
    t.nested("data", &C::data, data_fields());
    t.nested("engine", &C::engine, engine_fields()).after_read(check_supported_here);
    t.nested("optimizer", &C::optimizer, optim_fields());
    t.nested("scheduler", &C::scheduler, scheduler_fields());
    t.nested("ema", &C::ema, ema_fields()).enabled_by_presence(&EmaConfig::enabled);
    t.nested("train", &C::train, train_fields());
    t.nested("checkpoint", &C::checkpoint, checkpoint_fields());
    t.nested("sample", &C::sample, sample_fields());
    t.nested("log", &C::log, log_fields());
    t.nested("profile", &C::profile, profile_fields());
    t.nested("loss", &C::loss, loss_fields());
    t.nested("lora", &C::lora, lora_fields()).enabled_by_presence(&LoraConfig::enabled);
    t.rules(check_across_tables);
    return t;
  }();
  return table;
}

RunConfig run_config_from_toml(ConfigTable& root) {
  RunConfig c;
  c.source = root.file();
  run_fields().read(root, c);
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

#ifdef ZEST_WITH_CUDA
void apply_sdpa_backend();  // kernels/sdpa_backend_cuda.cpp
#endif

namespace {

// [engine] matmul into the process (kernels/matmul_precision.h), once the run file was read; check_supported_here
// already refused fp8 without CUDA.
void apply_matmul_precision(const EngineConfig& engine) {
  const bool fp8 = engine.matmul == MatmulPrecision::fp8;
#ifdef ZEST_WITH_CUDA
  if (fp8) {
    const std::string why_not = fp8_products_unavailable_here();
    if (!why_not.empty()) throw Error("engine.matmul = \"fp8\": " + why_not + "; use matmul = \"bf16\"");
  }
#endif
  set_fp8_training_products(fp8);
}

}  // namespace

KernelsConfig apply_run_kernels(const RunConfig& config, bool print) {
  std::vector<std::string> overrides;
  const KernelsConfig in_force = KernelSwitches::process().apply(config.engine.kernels, &overrides);
  if (print)
    for (const std::string& line : overrides) std::cerr << "zest: " << line << "\n";
#ifdef ZEST_WITH_CUDA
  apply_sdpa_backend();
#endif
  apply_matmul_precision(config.engine);
  return in_force;
}

std::string config_reference_markdown() { return reference_markdown(run_fields().rows("")); }

std::string with_config_reference(const std::string& docs) {
  const size_t begin = docs.find(kReferenceBegin);
  const size_t end = docs.find(kReferenceEnd);
  if (begin == std::string::npos || end == std::string::npos || end < begin)
    throw Error(std::string("the docs lack the lines '") + kReferenceBegin + "' and '" + kReferenceEnd +
                "' around the generated key table");
  const size_t after_begin = begin + std::string(kReferenceBegin).size();
  return docs.substr(0, after_begin) + "\n" + config_reference_markdown() + docs.substr(end);
}

std::string to_toml(const RunConfig& c) {
  ConfigWriter out;
  run_fields().write_into(c, out);
  std::string header = "# zest run configuration, resolved (every default written out)";
  if (!c.source.empty()) header += "\n# from " + c.source;
  return header + "\n\n" + out.str();
}

}  // namespace zest
