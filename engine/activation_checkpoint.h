// Activation checkpointing: a UnitRunner decorator that keeps only a unit's inputs during forward and
// recomputes the unit during backward (the "reentrant" scheme), for the units a CheckpointPolicy selects.
#pragma once

#include "engine/engine_config.h"
#include "engine/unit_module.h"

#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace zest {

// True on the calling thread while a checkpointed unit's forward is being recomputed inside backward
// (FLOP counting leaves recompute out, as the anchors do).
bool is_recomputing();

// Whether the unit at `unit_idx` (its position in unit_decls() order) is checkpointed: none → never,
// all → always, every_k → units 0, k, 2k, … (the first unit included, so k = 1 equals all).
bool is_checkpointed_unit(CheckpointPolicy policy, int every, size_t unit_idx);

// Runs one unit checkpointed. Forward: `fn` (through `inner` when given) runs under no-grad, so only
// the inputs are kept. Backward: the unit is re-run with grad enabled under the CPU/CUDA RNG state and
// autocast state of the forward, and the incoming gradients are backpropagated through the recomputed
// graph, so parameter gradients accumulate into .grad (their AccumulateGrad nodes fire) as without
// checkpointing; the inputs' gradients are returned to the outer graph. Results are bitwise equal to a
// plain run except that an input used several times inside the unit and also elsewhere gets its
// gradient summed per unit rather than per use (fp32 rounding-level differences upstream of it).
//
// Lifetime contract: `fn` is copied and called again during backward, after the model's forward has
// returned, so it must not capture locals of the forward by reference (capture `this` and values).
// Inputs may be undefined or non-floating (masks); outputs may be undefined, non-floating or inputs.
// Without grad mode (evaluation) the unit simply runs.
// `after_backward`, when given, runs once the unit's recompute and nested backward have returned (every
// gradient of this use of the unit's parameters is accumulated): the engine's unit-level post-backward
// signal for checkpointed units.
// RNG: with `RngAccess::read` the generators' state is read before and after the forward, and the recompute
// restores it only when the forward moved one; `drew_random_numbers`, when given, says whether it did.
// `RngAccess::none` touches no generator — for a unit known to draw none, inside a CUDA graph capture (where
// the generators' host state cannot be read).
enum class RngAccess { read, none };
Tensors checkpoint_unit(const std::string& unit_name, const UnitFn& fn, const Tensors& inputs,
                        const std::shared_ptr<UnitRunner>& inner = nullptr,
                        std::function<void()> after_backward = nullptr, RngAccess rng_access = RngAccess::read,
                        bool* drew_random_numbers = nullptr);

// The decorator: checkpoints the units the policy selects and runs the others plainly, both through
// `inner` when given (e.g. a parameter-gathering runner), so runners nest.
class CheckpointRunner : public UnitRunner {
 public:
  // `unit_names`: every unit in unit_decls() order (a unit is selected by its position).
  CheckpointRunner(CheckpointPolicy policy, int every, const std::vector<std::string>& unit_names,
                   std::shared_ptr<UnitRunner> inner = nullptr);

  Tensors run(const std::string& unit_name, const UnitFn& fn, const Tensors& inputs) override;
  bool is_checkpointed(const std::string& unit_name) const;
  // Called with the unit's name after each checkpointed unit's backward (see checkpoint_unit).
  void set_after_backward(std::function<void(const std::string&)> callback) { after_backward_ = std::move(callback); }
  // The first checkpointed unit whose forward drew random numbers (dropout) in an eager step, "" while none
  // has: such a unit's recompute restores the generators' state on the host, which a CUDA graph cannot hold.
  const std::string& unit_drawing_random_numbers() const { return unit_drawing_random_numbers_; }
  // While a step is captured as a CUDA graph: the units run without touching the generators (they drew
  // no random numbers in the eager steps before; refused if one did).
  void set_capturing(bool capturing);

 private:
  std::function<void(const std::string&)> after_backward_;
  std::string unit_drawing_random_numbers_;
  bool capturing_ = false;
  std::set<std::string> known_units_;
  std::set<std::string> checkpointed_units_;
  std::shared_ptr<UnitRunner> inner_;
};

// The runner for `config.activation_checkpointing` over `model`'s units, wrapping `inner`; null with the
// policy `none` (no decorator needed).
std::shared_ptr<CheckpointRunner> make_checkpoint_runner(const EngineConfig& config, const UnitModule& model,
                                                         std::shared_ptr<UnitRunner> inner = nullptr);

}  // namespace zest
