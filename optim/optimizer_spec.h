// An optimizer's description as the host code reads it — its name, state tensors, [optimizer] keys,
// default betas and state bytes per element — built from its update rule (optim/optimizers.h), so the
// config reader, the checkpoint's tensor kinds and the memory estimates follow the rule.
#pragma once

#include "optim/optimizers.h"

#include <cstdint>
#include <string>
#include <vector>

namespace zest {

struct OptimConfig;  // optim/optim_config.h

struct OptimizerSpec {
  OptimizerKind kind = OptimizerKind::adamw;
  std::string name;                 // [optimizer] name
  std::vector<std::string> states;  // state tensor names, each fp32 [numel], in checkpoint order
  std::vector<HyperKey> keys;       // [optimizer] keys read besides lr, weight_decay, no_decay
  double default_beta1 = 0.9, default_beta2 = 0.999;
  int (*live_states)(const OptimHyper&) = nullptr;  // states that hold information (memory estimates)

  bool reads(const std::string& key) const;
};

const std::vector<OptimizerSpec>& optimizer_specs();  // in kOptimizerKinds order
const OptimizerSpec& optimizer_spec(OptimizerKind kind);
// The configured hyper-parameters in fp32, as every update path computes.
OptimHyper optim_hyper(const OptimConfig& config);
// State bytes per element for a configuration without building it (memory estimates).
int64_t optimizer_state_bytes_per_element(const OptimConfig& config);

}  // namespace zest
