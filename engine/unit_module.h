// UnitModule: the contract between a model and the engine. A model declares its units (groups of
// parameters that are gathered, reduced and checkpointed together) and runs each unit's forward through
// run_unit(), so the engine can wrap units (activation checkpointing now, stage-3 gathering later)
// without the model knowing which stage or policy is active.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace zest {

// One unit: a name for logs/checkpoints and the state-dict prefixes of the parameters it owns.
// A parameter belongs to the first unit (in declaration order) with a matching prefix; a prefix
// ending in '.' matches a submodule, one without matches a parameter name exactly.
struct UnitDecl {
  std::string name;
  std::vector<std::string> prefixes;
};

using Tensors = std::vector<torch::Tensor>;
// A unit's forward as a pure function of tensors (non-tensor arguments are captured by the lambda).
using UnitFn = std::function<Tensors(const Tensors&)>;

// Runs a unit's forward. The default runs it plainly; the engine installs decorators.
class UnitRunner {
 public:
  virtual ~UnitRunner() = default;
  virtual Tensors run(const std::string& unit_name, const UnitFn& fn, const Tensors& inputs) = 0;
};

class UnitModule : public torch::nn::Module {
 public:
  // Units in forward order. Every trainable parameter must be covered by exactly one unit.
  virtual std::vector<UnitDecl> unit_decls() const = 0;

  void set_unit_runner(std::shared_ptr<UnitRunner> runner) { unit_runner_ = std::move(runner); }
  const std::shared_ptr<UnitRunner>& unit_runner() const { return unit_runner_; }

 protected:
  // Models call this around every unit's forward, e.g.
  //   auto out = run_unit("double_blocks.3", [&](const Tensors& in) { return Tensors{...}; }, {x, c});
  Tensors run_unit(const std::string& unit_name, const UnitFn& fn, const Tensors& inputs) {
    if (!unit_runner_) return fn(inputs);
    return unit_runner_->run(unit_name, fn, inputs);
  }

 private:
  std::shared_ptr<UnitRunner> unit_runner_;
};

}  // namespace zest
