// Activation checkpointing (see activation_checkpoint.h): the custom autograd Function that drops a
// unit's activations and recomputes them in backward, its RNG bookkeeping, and the policy decorator.
#include "engine/activation_checkpoint.h"

#include "core/check.h"
#include "core/compat.h"

#include <torch/torch.h>

#include <algorithm>
#include <mutex>
#include <optional>
#include <utility>

namespace zest {
namespace {

// ----------------------------------------------------------------------------------------------------
// RNG state: the recompute must draw the same random numbers (dropout) as the forward did.

// Snapshot of the CPU generator and of the CUDA generators of the devices a unit's inputs live on.
class RngSnapshot {
 public:
  static RngSnapshot capture(const std::vector<c10::Device>& cuda_devices) {
    RngSnapshot snapshot;
    snapshot.cpu_state_ = get_state(at::globalContext().defaultGenerator(c10::Device(c10::kCPU)));
    for (const c10::Device& device : cuda_devices) {
      snapshot.cuda_states_.emplace_back(device,
                                         get_state(at::globalContext().defaultGenerator(device)));
    }
    return snapshot;
  }

  void restore() const {
    set_state(at::globalContext().defaultGenerator(c10::Device(c10::kCPU)), cpu_state_);
    for (const auto& [device, state] : cuda_states_) {
      set_state(at::globalContext().defaultGenerator(device), state);
    }
  }

  // Whether no generator moved between this snapshot and `later`: nothing drew random numbers in between.
  bool same_as(const RngSnapshot& later) const {
    if (!torch::equal(cpu_state_, later.cpu_state_) || cuda_states_.size() != later.cuda_states_.size()) return false;
    for (size_t i = 0; i < cuda_states_.size(); ++i) {
      if (!torch::equal(cuda_states_[i].second, later.cuda_states_[i].second)) return false;
    }
    return true;
  }

  std::vector<c10::Device> cuda_devices() const {
    std::vector<c10::Device> devices;
    for (const auto& entry : cuda_states_) devices.push_back(entry.first);
    return devices;
  }

 private:
  // Generators are shared handles: a copy refers to the same (default) generator.
  static torch::Tensor get_state(at::Generator generator) {
    std::lock_guard<std::mutex> lock(generator.mutex());
    return generator.get_state();
  }
  static void set_state(at::Generator generator, const torch::Tensor& state) {
    std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_state(state);
  }

  torch::Tensor cpu_state_;
  std::vector<std::pair<c10::Device, torch::Tensor>> cuda_states_;
};

std::vector<c10::Device> cuda_devices_of(const Tensors& tensors) {
  std::vector<c10::Device> devices;
#ifdef ZEST_WITH_CUDA
  if (!torch::cuda::is_available()) return devices;
  for (const torch::Tensor& t : tensors) {
    if (!t.defined() || !t.is_cuda()) continue;
    if (std::find(devices.begin(), devices.end(), t.device()) == devices.end()) {
      devices.push_back(t.device());
    }
  }
#endif
  return devices;
}

// Sets the RNG and autocast state of the forward for the recompute, and puts back the current ones
// afterwards, so the recompute does not shift the random stream of the rest of the step.
class ForwardStateScope {
 public:
  ForwardStateScope(const std::optional<RngSnapshot>& forward_rng, const compat::AutocastState& forward_autocast)
      : saved_autocast_(compat::autocast_state()) {
    if (forward_rng) {
      saved_rng_ = RngSnapshot::capture(forward_rng->cuda_devices());
      forward_rng->restore();
    }
    compat::set_autocast_state(forward_autocast);
  }
  ~ForwardStateScope() {
    if (saved_rng_) saved_rng_->restore();
    compat::set_autocast_state(saved_autocast_);
  }
  ForwardStateScope(const ForwardStateScope&) = delete;
  ForwardStateScope& operator=(const ForwardStateScope&) = delete;

 private:
  std::optional<RngSnapshot> saved_rng_;
  const compat::AutocastState saved_autocast_;
};

thread_local int recompute_depth = 0;

struct RecomputeScope {
  RecomputeScope() { ++recompute_depth; }
  ~RecomputeScope() { --recompute_depth; }
  RecomputeScope(const RecomputeScope&) = delete;
  RecomputeScope& operator=(const RecomputeScope&) = delete;
};

// ----------------------------------------------------------------------------------------------------
// The autograd Function.

// Everything the backward needs besides the saved inputs; travels in the context as a capsule because
// the Function's methods are static.
struct CheckpointState : torch::CustomClassHolder {
  std::string unit_name;
  UnitFn fn;  // a copy: the caller's std::function is gone by the time backward runs
  std::shared_ptr<UnitRunner> inner;
  std::vector<bool> input_defined;          // per input position
  std::vector<bool> input_requires_grad;    // per defined input
  std::vector<size_t> defined_output_positions;  // outputs handed to autograd (undefined ones are not)
  size_t num_outputs = 0;
  std::optional<RngSnapshot> rng;  // none: the forward drew no random numbers the recompute must repeat
  compat::AutocastState autocast;
  std::function<void()> after_backward;
};

Tensors run_through(const std::shared_ptr<UnitRunner>& inner, const std::string& unit_name,
                    const UnitFn& fn, const Tensors& inputs) {
  return inner ? inner->run(unit_name, fn, inputs) : fn(inputs);
}

bool is_differentiable(const torch::Tensor& t) {
  return at::isFloatingType(t.scalar_type()) || at::isComplexType(t.scalar_type());
}

// Rebuilds the unit's argument list from the defined inputs, as fresh leaves that require grad where
// the originals did, so the recompute's backward deposits the input gradients in their .grad.
Tensors recompute_inputs(const CheckpointState& state, const torch::autograd::variable_list& saved) {
  Tensors inputs(state.input_defined.size());
  size_t next = 0;
  for (size_t pos = 0; pos < inputs.size(); ++pos) {
    if (!state.input_defined[pos]) continue;
    const bool requires_grad = state.input_requires_grad[next];
    inputs[pos] = saved[next].detach().requires_grad_(requires_grad);
    ++next;
  }
  return inputs;
}

struct CheckpointFunction : torch::autograd::Function<CheckpointFunction> {
  // `dummy` requires grad, so the backward runs (and the unit's parameters get gradients) even when no
  // input requires grad, e.g. the first unit fed by data.
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                const torch::Tensor& dummy, at::TensorList inputs,
                                                const c10::intrusive_ptr<CheckpointState>& state) {
    ctx->set_materialize_grads(false);  // unused outputs stay undefined instead of becoming zeros
    ctx->save_for_backward(inputs.vec());
    ctx->saved_data["state"] = c10::IValue::make_capsule(state);

    Tensors all_inputs(state->input_defined.size());
    size_t next = 0;
    for (size_t pos = 0; pos < all_inputs.size(); ++pos) {
      if (state->input_defined[pos]) all_inputs[pos] = inputs[next++];
    }
    const Tensors outputs = run_through(state->inner, state->unit_name, state->fn, all_inputs);

    state->num_outputs = outputs.size();
    torch::autograd::variable_list defined_outputs;
    torch::autograd::variable_list non_differentiable;
    for (size_t pos = 0; pos < outputs.size(); ++pos) {
      if (!outputs[pos].defined()) continue;
      state->defined_output_positions.push_back(pos);
      defined_outputs.push_back(outputs[pos]);
      if (!is_differentiable(outputs[pos])) non_differentiable.push_back(outputs[pos]);
    }
    ctx->mark_non_differentiable(non_differentiable);
    return defined_outputs;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto state = c10::static_intrusive_pointer_cast<CheckpointState>(
        ctx->saved_data["state"].toCapsule());
    const Tensors inputs = recompute_inputs(*state, ctx->get_saved_variables());

    Tensors outputs;
    {
      const ForwardStateScope forward_state(state->rng, state->autocast);
      const torch::AutoGradMode grad_mode(true);
      const RecomputeScope recomputing;
      outputs = run_through(state->inner, state->unit_name, state->fn, inputs);
    }
    ZEST_CHECK(outputs.size() == state->num_outputs, "activation checkpointing: unit '",
               state->unit_name, "' returned ", outputs.size(), " outputs when recomputed but ",
               state->num_outputs, " in forward");

    torch::autograd::variable_list roots;
    torch::autograd::variable_list root_grads;
    for (size_t i = 0; i < grad_outputs.size(); ++i) {
      const torch::Tensor& out = outputs[state->defined_output_positions[i]];
      if (!grad_outputs[i].defined() || !out.defined() || !out.requires_grad()) continue;
      roots.push_back(out);
      root_grads.push_back(grad_outputs[i]);
    }
    // Nested ("reentrant") backward: accumulates into the parameters' .grad and the inputs' .grad.
    if (!roots.empty()) torch::autograd::backward(roots, root_grads);
    if (state->after_backward) state->after_backward();

    // One gradient per forward argument: dummy, each defined input, then the (non-tensor) state.
    torch::autograd::variable_list grads{torch::Tensor()};
    for (size_t pos = 0; pos < inputs.size(); ++pos) {
      if (state->input_defined[pos]) grads.push_back(inputs[pos].grad());
    }
    grads.emplace_back();
    return grads;
  }
};

}  // namespace

// ------------------------------------------------------------------------------------------------------

bool is_recomputing() { return recompute_depth > 0; }

bool is_checkpointed_unit(CheckpointPolicy policy, int every, size_t unit_idx) {
  switch (policy) {
    case CheckpointPolicy::none:
      return false;
    case CheckpointPolicy::all:
      return true;
    case CheckpointPolicy::every_k:
      ZEST_CHECK(every >= 1, "activation checkpointing every_k needs checkpoint_every >= 1, got ", every);
      return unit_idx % static_cast<size_t>(every) == 0;
  }
  ZEST_FAIL("unknown activation checkpointing policy ", static_cast<int>(policy));
}

Tensors checkpoint_unit(const std::string& unit_name, const UnitFn& fn, const Tensors& inputs,
                        const std::shared_ptr<UnitRunner>& inner, std::function<void()> after_backward,
                        RngAccess rng_access, bool* drew_random_numbers) {
  if (!torch::GradMode::is_enabled()) return run_through(inner, unit_name, fn, inputs);

  auto state = c10::make_intrusive<CheckpointState>();
  state->unit_name = unit_name;
  state->fn = fn;
  state->inner = inner;
  state->after_backward = std::move(after_backward);
  if (rng_access == RngAccess::read) state->rng = RngSnapshot::capture(cuda_devices_of(inputs));
  state->autocast = compat::autocast_state();
  Tensors defined_inputs;
  for (const torch::Tensor& t : inputs) {
    state->input_defined.push_back(t.defined());
    if (!t.defined()) continue;
    defined_inputs.push_back(t);
    state->input_requires_grad.push_back(t.requires_grad());
  }

  const torch::Tensor dummy = torch::empty({0}, torch::TensorOptions().requires_grad(true));
  const torch::autograd::variable_list defined_outputs =
      CheckpointFunction::apply(dummy, at::TensorList(defined_inputs), state);

  Tensors outputs(state->num_outputs);
  for (size_t i = 0; i < defined_outputs.size(); ++i) {
    outputs[state->defined_output_positions[i]] = defined_outputs[i];
  }
  const bool drew = state->rng && !state->rng->same_as(RngSnapshot::capture(state->rng->cuda_devices()));
  if (!drew) state->rng.reset();  // the recompute has nothing to replay
  if (drew_random_numbers != nullptr) *drew_random_numbers = drew;
  return outputs;
}

CheckpointRunner::CheckpointRunner(CheckpointPolicy policy, int every,
                                   const std::vector<std::string>& unit_names,
                                   std::shared_ptr<UnitRunner> inner)
    : inner_(std::move(inner)) {
  for (size_t idx = 0; idx < unit_names.size(); ++idx) {
    ZEST_CHECK(known_units_.insert(unit_names[idx]).second, "activation checkpointing: unit name '",
               unit_names[idx], "' is declared twice");
    if (is_checkpointed_unit(policy, every, idx)) checkpointed_units_.insert(unit_names[idx]);
  }
}

void CheckpointRunner::set_capturing(bool capturing) {
  ZEST_CHECK(!capturing || unit_drawing_random_numbers_.empty(), "activation checkpointing: unit '",
             unit_drawing_random_numbers_, "' draws random numbers, so its steps cannot be captured");
  capturing_ = capturing;
}

bool CheckpointRunner::is_checkpointed(const std::string& unit_name) const {
  return checkpointed_units_.count(unit_name) > 0;
}

Tensors CheckpointRunner::run(const std::string& unit_name, const UnitFn& fn, const Tensors& inputs) {
  if (known_units_.count(unit_name) == 0) {
    std::string known;
    for (const std::string& name : known_units_) known += (known.empty() ? "" : ", ") + name;
    ZEST_FAIL("activation checkpointing: unit '", unit_name,
              "' is run but not declared in unit_decls() (declared: ", known, ")");
  }
  if (is_checkpointed(unit_name)) {
    std::function<void()> after;
    if (after_backward_) after = [callback = after_backward_, unit_name] { callback(unit_name); };
    if (capturing_) return checkpoint_unit(unit_name, fn, inputs, inner_, std::move(after), RngAccess::none);
    bool drew = false;
    Tensors outputs = checkpoint_unit(unit_name, fn, inputs, inner_, std::move(after), RngAccess::read, &drew);
    if (drew && unit_drawing_random_numbers_.empty()) unit_drawing_random_numbers_ = unit_name;
    return outputs;
  }
  return run_through(inner_, unit_name, fn, inputs);
}

std::shared_ptr<CheckpointRunner> make_checkpoint_runner(const EngineConfig& config, const UnitModule& model,
                                                         std::shared_ptr<UnitRunner> inner) {
  if (config.activation_checkpointing == CheckpointPolicy::none) return nullptr;
  std::vector<std::string> names;
  for (const UnitDecl& decl : model.unit_decls()) names.push_back(decl.name);
  return std::make_shared<CheckpointRunner>(config.activation_checkpointing, config.checkpoint_every,
                                            names, std::move(inner));
}

}  // namespace zest
