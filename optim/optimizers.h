// The optimizers zest has: one enum value and one update rule each (optim/update_rule.h says what a rule
// declares). Every path — CPU, fused CUDA, host offload — and the checkpoint and memory-estimate code
// reach a rule through with_rule(), so adding an optimizer is its rule header plus one line in each of the
// three lists below. Compiled by g++ and nvcc.
#pragma once

#include "optim/adamw.h"
#include "optim/lion.h"
#include "optim/sgd.h"

namespace zest {

enum class OptimizerKind { adamw, sgd, lion };
inline constexpr OptimizerKind kOptimizerKinds[] = {OptimizerKind::adamw, OptimizerKind::sgd, OptimizerKind::lion};

// Calls fn(Rule{}) with the rule of `kind` and returns its result.
template <typename Fn>
decltype(auto) with_rule(OptimizerKind kind, Fn&& fn) {
  switch (kind) {
    case OptimizerKind::sgd: return fn(Sgd{});
    case OptimizerKind::lion: return fn(Lion{});
    case OptimizerKind::adamw: break;
  }
  return fn(AdamW{});
}

}  // namespace zest
