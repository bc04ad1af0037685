// The optimizer descriptions, one per update rule of optim/optimizers.h.
#include "optim/optimizer_spec.h"

#include "optim/optim_config.h"

#include <iterator>
#include <type_traits>

namespace zest {
namespace {

template <typename Rule>
OptimizerSpec spec_of(OptimizerKind kind) {
  static_assert(std::is_same_v<typename Rule::State, float>, "every path keeps optimizer state in fp32");
  static_assert(kStateCount<Rule> <= kMaxStates, "more state tensors than the update paths carry");
  OptimizerSpec s;
  s.kind = kind;
  s.name = Rule::kName;
  s.states.assign(std::begin(Rule::kStates), std::end(Rule::kStates));
  s.keys.assign(std::begin(Rule::kKeys), std::end(Rule::kKeys));
  s.default_beta1 = Rule::kDefaultBetas[0];
  s.default_beta2 = Rule::kDefaultBetas[1];
  s.live_states = [](const OptimHyper& h) { return Rule::live_states(h); };
  return s;
}

}  // namespace

bool OptimizerSpec::reads(const std::string& key) const {
  for (const HyperKey& k : keys)
    if (key == k.key) return true;
  return false;
}

const std::vector<OptimizerSpec>& optimizer_specs() {
  static const std::vector<OptimizerSpec> specs = [] {
    std::vector<OptimizerSpec> all;
    for (const OptimizerKind kind : kOptimizerKinds)
      all.push_back(with_rule(kind, [&]<typename Rule>(Rule) { return spec_of<Rule>(kind); }));
    return all;
  }();
  return specs;
}

const OptimizerSpec& optimizer_spec(OptimizerKind kind) {
  for (const OptimizerSpec& spec : optimizer_specs())
    if (spec.kind == kind) return spec;
  return optimizer_specs().front();  // unreachable: every kind has a rule
}

OptimHyper optim_hyper(const OptimConfig& config) {
  OptimHyper h;
  h.beta1 = static_cast<float>(config.beta1);
  h.beta2 = static_cast<float>(config.beta2);
  h.eps = static_cast<float>(config.eps);
  h.weight_decay = static_cast<float>(config.weight_decay);
  h.momentum = static_cast<float>(config.momentum);
  h.nesterov = config.nesterov;
  return h;
}

int64_t optimizer_state_bytes_per_element(const OptimConfig& config) {
  const OptimizerSpec& spec = optimizer_spec(config.name);
  return spec.live_states(optim_hyper(config)) * static_cast<int64_t>(sizeof(float));
}

}  // namespace zest
