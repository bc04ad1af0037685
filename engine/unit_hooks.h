// The autograd and forward plumbing that tells the engine where each unit is in a step:
//   before/after a unit's forward (UnitRunner decorators around the model's run_unit calls),
//   before a unit's backward (a hook on the unit's outputs: their gradient has arrived),
//   after a unit's backward (an identity autograd Function on the unit's inputs: their gradient is done).
// The engine implements UnitEvents and decides what happens at each point (stage policy); this file only
// wires the signals. Per parameter, the gradient accumulators' hooks are the GradReducer's own
// (engine/grad_reducer.h): they lead straight into the gradient walk (docs/design.md).
#pragma once

#include "engine/unit_module.h"

#include <torch/torch.h>

#include <functional>
#include <map>
#include <memory>
#include <string>

namespace zest {

class UnitEvents {
 public:
  virtual ~UnitEvents() = default;
  virtual void before_unit_forward(size_t unit_idx) = 0;   // every run, recompute included
  virtual void after_unit_forward(size_t unit_idx) = 0;    // the step's forward only (not a recompute)
  virtual void unit_marked_for_backward(size_t unit_idx) = 0;  // its inputs carry a backward marker
  virtual void before_unit_backward(size_t unit_idx) = 0;
  virtual void after_unit_backward(size_t unit_idx) = 0;
};

// Shared by every hook so that hooks outliving the engine (autograd keeps nodes alive) do nothing.
struct UnitEventsLink {
  UnitEvents* events = nullptr;
};

// The index a runner's unit map gives a declared unit that holds no trainable parameter (every parameter
// frozen, e.g. a LoRA run's units without adapters): the engine keeps no buffers for it, so the runners run
// it without reporting events for it.
inline constexpr size_t kFrozenUnit = static_cast<size_t>(-1);

// Innermost decorator: reports before_unit_forward, then runs the unit (through `inner` when given, e.g.
// a user's own runner). Sits below activation checkpointing so a recompute reports too.
class ForwardEntryRunner final : public UnitRunner {
 public:
  ForwardEntryRunner(std::map<std::string, size_t> unit_index, std::shared_ptr<UnitEventsLink> link,
                     std::shared_ptr<UnitRunner> inner);
  Tensors run(const std::string& unit_name, const UnitFn& fn, const Tensors& inputs) override;

 private:
  std::map<std::string, size_t> unit_index_;
  std::shared_ptr<UnitEventsLink> link_;
  std::shared_ptr<UnitRunner> inner_;
};

// Outermost decorator (above activation checkpointing): in grad mode it hooks the unit's outputs and
// arranges its after-backward signal — a marker on its inputs, or, for a checkpointed unit, the
// checkpoint's own end of backward (its reentrant backward may accumulate a parameter more than once);
// then runs the unit through `inner` and reports after_unit_forward.
class BackwardSignalRunner final : public UnitRunner {
 public:
  // `is_checkpointed(name)`: whether `inner` checkpoints the unit and reports its end of backward.
  BackwardSignalRunner(std::map<std::string, size_t> unit_index, std::shared_ptr<UnitEventsLink> link,
                       std::shared_ptr<UnitRunner> inner, std::function<bool(const std::string&)> is_checkpointed);
  Tensors run(const std::string& unit_name, const UnitFn& fn, const Tensors& inputs) override;

 private:
  size_t index_of(const std::string& unit_name) const;
  std::map<std::string, size_t> unit_index_;
  std::shared_ptr<UnitEventsLink> link_;
  std::shared_ptr<UnitRunner> inner_;
  std::function<bool(const std::string&)> is_checkpointed_;
};

}  // namespace zest
