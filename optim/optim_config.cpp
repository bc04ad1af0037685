// OptimConfig / SchedulerConfig: enum names, the weight-decay exclusion rule, and the [optimizer] and
// [scheduler] TOML readers (strict) and writers.
#include "optim/optim_config.h"

#include "core/config_reader.h"
#include "core/config_writer.h"
#include "optim/optimizer_spec.h"

#include <cmath>
#include <map>

namespace zest {

const char* to_string(OptimizerKind k) { return optimizer_spec(k).name.c_str(); }

const char* to_string(ScheduleKind k) {
  switch (k) {
    case ScheduleKind::constant: return "constant";
    case ScheduleKind::cosine: return "cosine";
    case ScheduleKind::linear: return "linear";
  }
  return "?";
}

bool no_decay_matches(const std::vector<std::string>& patterns, const std::string& param_name) {
  size_t start = 0;
  while (start <= param_name.size()) {
    const size_t dot = param_name.find('.', start);
    const std::string component = param_name.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    for (const auto& pattern : patterns) {
      if (!pattern.empty() && component.find(pattern) != std::string::npos) return true;
    }
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return false;
}

namespace {

constexpr ScheduleKind kSchedules[] = {ScheduleKind::constant, ScheduleKind::cosine, ScheduleKind::linear};

// DeepSpeed's layout ({"type": ..., "params": {...}}) and names, with the zest spelling.
const std::map<std::string, std::string> kOptimizerHints = {
    {"type", "zest calls it name"},
    {"params", "zest reads lr, betas, ... directly in [optimizer], not in [optimizer.params]"},
    {"beta1", "write betas = [beta1, beta2]"},
    {"beta2", "write betas = [beta1, beta2]"},
};
const std::map<std::string, std::string> kSchedulerHints = {
    {"type", "zest calls it name"},
    {"params", "zest reads warmup_steps, ... directly in [scheduler], not in [scheduler.params]"},
    {"warmup_num_steps", "zest calls it warmup_steps"},
    {"total_num_steps", "zest counts decay_steps after warm-up"},
};

void check(ConfigTable& table, bool ok, const std::string& key, const std::string& message) {
  if (!ok) table.fail(key, message);
}

// Keys only other optimizers read are refused: silently ignoring them hides a mistake.
void reject_foreign_keys(ConfigTable& table, OptimizerKind name) {
  const OptimizerSpec& chosen = optimizer_spec(name);
  std::map<std::string, std::vector<std::string>> owners;  // key -> the optimizers reading it
  for (const OptimizerSpec& spec : optimizer_specs())
    for (const HyperKey& key : spec.keys) owners[key.key].push_back(spec.name);
  for (const auto& [key, names] : owners) {
    if (chosen.reads(key)) continue;
    std::string who = "\"" + names[0] + "\"";
    for (size_t i = 1; i < names.size(); ++i) who += (i + 1 == names.size() ? " or \"" : ", \"") + names[i] + "\"";
    check(table, !table.has(key), key,
          "is only used by optimizer " + who + " (name is \"" + chosen.name + "\")");
  }
}

}  // namespace

OptimConfig OptimConfig::from_toml(ConfigTable& table) {
  OptimConfig c;
  c.name = table.get_enum("name", c.name, kOptimizerKinds);
  const OptimizerSpec& spec = optimizer_spec(c.name);
  c.beta1 = spec.default_beta1;
  c.beta2 = spec.default_beta2;
  c.lr = table.get("lr", c.lr);
  const std::vector<double> betas = table.get("betas", std::vector<double>{c.beta1, c.beta2});
  c.eps = table.get("eps", c.eps);
  c.weight_decay = table.get("weight_decay", c.weight_decay);
  c.momentum = table.get("momentum", c.momentum);
  c.nesterov = table.get("nesterov", c.nesterov);
  c.no_decay = table.get("no_decay", c.no_decay);
  table.reject_unknown_keys(kOptimizerHints);

  reject_foreign_keys(table, c.name);
  check(table, std::isfinite(c.lr) && c.lr > 0, "lr", "must be > 0");
  check(table, betas.size() == 2, "betas",
        "must have exactly 2 values [beta1, beta2] (got " + std::to_string(betas.size()) + ")");
  for (const double beta : betas)
    check(table, beta >= 0 && beta < 1, "betas", "each beta must be in [0, 1) (got " + toml_float(beta) + ")");
  c.beta1 = betas[0];
  c.beta2 = betas[1];
  check(table, std::isfinite(c.eps) && c.eps > 0, "eps", "must be > 0");
  check(table, std::isfinite(c.weight_decay) && c.weight_decay >= 0, "weight_decay", "must be >= 0");
  check(table, c.momentum >= 0 && c.momentum < 1, "momentum", "must be in [0, 1)");
  check(table, !c.nesterov || c.momentum > 0, "nesterov", "needs momentum > 0");
  for (const std::string& pattern : c.no_decay)
    check(table, !pattern.empty(), "no_decay", "patterns must not be empty (an empty one would match nothing)");
  return c;
}

SchedulerConfig SchedulerConfig::from_toml(ConfigTable& table) {
  SchedulerConfig c;
  c.name = table.get_enum("name", c.name, kSchedules);
  c.warmup_steps = table.get("warmup_steps", c.warmup_steps);
  c.decay_steps = table.get("decay_steps", c.decay_steps);
  c.min_lr = table.get("min_lr", c.min_lr);
  table.reject_unknown_keys(kSchedulerHints);

  check(table, c.warmup_steps >= 0, "warmup_steps", "must be >= 0");
  check(table, c.decay_steps >= 0, "decay_steps", "must be >= 0");
  check(table, std::isfinite(c.min_lr) && c.min_lr >= 0, "min_lr", "must be >= 0");
  for (const char* key : {"decay_steps", "min_lr"})
    check(table, c.name != ScheduleKind::constant || !table.has(key), key,
          "is only used by the cosine and linear schedules (name is \"constant\")");
  return c;
}

void to_toml(const OptimConfig& c, ConfigWriter& out) {
  ConfigWriter& t = out.table("optimizer", "optimizer of the fp32 master shards");
  std::string names;
  for (const OptimizerSpec& spec : optimizer_specs()) names += (names.empty() ? "" : "|") + spec.name;
  t.set("name", to_string(c.name), names);
  t.set("lr", c.lr, "peak learning rate");
  // The optimizer's own keys (its rule's kKeys), with the rule's docs.
  const OptimizerSpec& spec = optimizer_spec(c.name);
  auto set_if_read = [&](const char* key, const auto& value) {
    for (const HyperKey& k : spec.keys)
      if (std::string(k.key) == key) t.set(key, value, k.doc);
  };
  set_if_read("betas", std::vector<double>{c.beta1, c.beta2});
  set_if_read("eps", c.eps);
  t.set("weight_decay", c.weight_decay, "decoupled weight decay (AdamW, Lion) / L2 (SGD)");
  set_if_read("momentum", c.momentum);
  set_if_read("nesterov", c.nesterov);
  t.set("no_decay", c.no_decay, "name patterns excluded from weight decay");
}

void to_toml(const SchedulerConfig& c, ConfigWriter& out) {
  ConfigWriter& t = out.table("scheduler", "learning-rate schedule");
  t.set("name", to_string(c.name), "constant|cosine|linear");
  t.set("warmup_steps", c.warmup_steps, "linear warm-up steps: update t (from 0) uses lr*(t+1)/warmup_steps");
  if (c.name == ScheduleKind::constant) return;
  t.set("decay_steps", c.decay_steps, "steps of decay after warm-up");
  t.set("min_lr", c.min_lr, "learning rate at the end of decay");
}

}  // namespace zest
