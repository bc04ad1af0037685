// OptimConfig and SchedulerConfig: the [optimizer] and [scheduler] tables, with their TOML reading
// (strict; cross-table rules such as min_lr <= lr live in train/run_config.cpp) and printing.
#pragma once

#include "optim/optimizers.h"

#include <string>
#include <vector>

namespace zest {

class ConfigTable;   // core/config_reader.h
class ConfigWriter;  // core/config_writer.h
template <typename C>
class FieldTable;  // core/field_table.h

enum class ScheduleKind { constant, cosine, linear };
const char* to_string(OptimizerKind k);
const char* to_string(ScheduleKind k);

struct OptimConfig {
  OptimizerKind name = OptimizerKind::adamw;
  double lr = 1e-4;
  double beta1 = 0.9;            // TOML: betas = [beta1, beta2]; the defaults are the optimizer's
  double beta2 = 0.999;          // (optim/adamw.h, lion.h)
  double eps = 1e-8;
  double weight_decay = 0.01;
  double momentum = 0.9;         // sgd only
  bool nesterov = false;         // sgd only
  // Each optimizer reads lr, weight_decay, no_decay and its own keys (its rule's kKeys).
  // Parameters excluded from weight decay: a pattern matches a state-dict name when it is a substring of
  // one of its dot-separated components ("bias" → "to_out.0.bias", "norm" → "norm1.weight",
  // "q_norm.weight"). Default: biases and norm weights.
  std::vector<std::string> no_decay = {"bias", "norm"};

  // Reads [optimizer]; keys of another optimizer only (momentum with adamw, betas with sgd) are errors.
  static OptimConfig from_toml(ConfigTable& table);
};

struct SchedulerConfig {
  ScheduleKind name = ScheduleKind::constant;
  int warmup_steps = 0;   // linear warm-up: update t (0-based) < warmup_steps uses lr·(t+1)/warmup_steps
  int decay_steps = 0;    // steps of cosine/linear decay after warm-up (0 = constant after warm-up; a run
                          // file's 0 with cosine/linear resolves to train.max_steps - warmup_steps)
  double min_lr = 0.0;    // floor reached at the end of decay

  static SchedulerConfig from_toml(ConfigTable& table);
};

// Write every field (defaults included) with its one-line doc as the [optimizer] / [scheduler] table.
void to_toml(const OptimConfig& config, ConfigWriter& out);
void to_toml(const SchedulerConfig& config, ConfigWriter& out);

// The [optimizer] and [scheduler] tables (core/field_table.h).
const FieldTable<OptimConfig>& optim_fields();
const FieldTable<SchedulerConfig>& scheduler_fields();

// True when a parameter named `param_name` is excluded from weight decay by `patterns`.
bool no_decay_matches(const std::vector<std::string>& patterns, const std::string& param_name);

}  // namespace zest
