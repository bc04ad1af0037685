// Unit signals for the engine (see unit_hooks.h).
#include "engine/unit_hooks.h"

#include "core/check.h"

#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/variable.h>

#include <vector>

namespace zest {
namespace {

UnitEvents* events_of(const std::shared_ptr<UnitEventsLink>& link) { return link ? link->events : nullptr; }

// ---- the backward marker on a unit's inputs ---------------------------------------------------------

struct MarkerState : torch::CustomClassHolder {
  std::weak_ptr<UnitEventsLink> link;
  size_t unit_idx = 0;
};

// Identity in forward. Its backward runs once the gradients of all of the unit's inputs are complete,
// i.e. after the unit's own backward (autograd runs AccumulateGrad nodes first among ready nodes, so the
// unit's parameter gradients are accumulated by then; with reentrant checkpointing, the unit's whole
// recompute-and-backward has returned).
struct BackwardMarker : torch::autograd::Function<BackwardMarker> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, at::TensorList inputs,
                                                const c10::intrusive_ptr<MarkerState>& state) {
    ctx->saved_data["state"] = c10::IValue::make_capsule(state);
    return inputs.vec();
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto state = c10::static_intrusive_pointer_cast<MarkerState>(ctx->saved_data["state"].toCapsule());
    if (auto link = state->link.lock(); UnitEvents* e = events_of(link)) e->after_unit_backward(state->unit_idx);
    grads.emplace_back();  // the state argument
    return grads;
  }
};

bool wants_grad(const torch::Tensor& t) { return t.defined() && t.requires_grad() && t.is_floating_point(); }

// Replaces the inputs that take part in autograd by marked aliases; false when none does.
bool mark_inputs(Tensors& inputs, const std::shared_ptr<UnitEventsLink>& link, size_t unit_idx) {
  std::vector<torch::Tensor> marked;
  std::vector<size_t> positions;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!wants_grad(inputs[i])) continue;
    marked.push_back(inputs[i]);
    positions.push_back(i);
  }
  if (marked.empty()) return false;
  auto state = c10::make_intrusive<MarkerState>();
  state->link = link;
  state->unit_idx = unit_idx;
  const auto outputs = BackwardMarker::apply(at::TensorList(marked), state);
  for (size_t k = 0; k < positions.size(); ++k) inputs[positions[k]] = outputs[k];
  return true;
}

void hook_outputs(const Tensors& outputs, const std::shared_ptr<UnitEventsLink>& link, size_t unit_idx) {
  std::weak_ptr<UnitEventsLink> weak = link;
  for (const torch::Tensor& out : outputs) {
    if (!wants_grad(out)) continue;
    torch::Tensor(out).register_hook([weak, unit_idx](const torch::Tensor&) {
      if (auto l = weak.lock(); UnitEvents* e = events_of(l)) e->before_unit_backward(unit_idx);
    });
  }
}

size_t lookup(const std::map<std::string, size_t>& index, const std::string& unit_name) {
  const auto it = index.find(unit_name);
  if (it != index.end()) return it->second;
  std::string known;
  for (const auto& [name, idx] : index) known += (known.empty() ? "" : ", ") + name;
  ZEST_FAIL("unit '", unit_name, "' is run but not declared in unit_decls() (declared: ", known, ")");
}

}  // namespace

ForwardEntryRunner::ForwardEntryRunner(std::map<std::string, size_t> unit_index,
                                       std::shared_ptr<UnitEventsLink> link, std::shared_ptr<UnitRunner> inner)
    : unit_index_(std::move(unit_index)), link_(std::move(link)), inner_(std::move(inner)) {}

Tensors ForwardEntryRunner::run(const std::string& unit_name, const UnitFn& fn, const Tensors& inputs) {
  const size_t u = lookup(unit_index_, unit_name);
  UnitEvents* e = events_of(link_);
  if (e && u != kFrozenUnit) e->before_unit_forward(u);
  return inner_ ? inner_->run(unit_name, fn, inputs) : fn(inputs);
}

BackwardSignalRunner::BackwardSignalRunner(std::map<std::string, size_t> unit_index,
                                           std::shared_ptr<UnitEventsLink> link, std::shared_ptr<UnitRunner> inner,
                                           std::function<bool(const std::string&)> is_checkpointed)
    : unit_index_(std::move(unit_index)),
      link_(std::move(link)),
      inner_(std::move(inner)),
      is_checkpointed_(std::move(is_checkpointed)) {
  ZEST_CHECK(inner_ != nullptr, "BackwardSignalRunner needs an inner runner");
}

Tensors BackwardSignalRunner::run(const std::string& unit_name, const UnitFn& fn, const Tensors& inputs) {
  const size_t u = lookup(unit_index_, unit_name);
  if (u == kFrozenUnit) return inner_->run(unit_name, fn, inputs);  // nothing of it to reduce or gather
  UnitEvents* events = events_of(link_);
  if (events == nullptr || !torch::GradMode::is_enabled()) {
    Tensors outputs = inner_->run(unit_name, fn, inputs);
    if (events) events->after_unit_forward(u);
    return outputs;
  }
  Tensors marked = inputs;
  if (is_checkpointed_ && is_checkpointed_(unit_name)) {
    events->unit_marked_for_backward(u);  // the checkpoint reports the end of its backward
  } else if (mark_inputs(marked, link_, u)) {
    events->unit_marked_for_backward(u);
  }
  Tensors outputs = inner_->run(unit_name, fn, marked);
  hook_outputs(outputs, link_, u);
  events->after_unit_forward(u);
  return outputs;
}

}  // namespace zest
