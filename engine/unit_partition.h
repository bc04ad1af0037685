// Assigns a module's trainable parameters to its declared units (first matching prefix wins), dedupes
// tied parameters (one slot, further names kept as aliases) and marks which get weight decay.
#pragma once

#include "engine/unit_layout.h"
#include "engine/unit_module.h"

#include <torch/torch.h>

#include <string>
#include <vector>

namespace zest {

struct UnitParams {
  std::string name;
  std::vector<ParamSlot> slots;        // offsets not yet assigned
  std::vector<torch::Tensor> tensors;  // same order as slots
};

// Every trainable parameter must match exactly one unit; unmatched ones are an error listing them.
// Units left empty are an error too (a typo in a prefix). no_decay: see optim/optim_config.h.
std::vector<UnitParams> partition_into_units(torch::nn::Module& model, const std::vector<UnitDecl>& decls,
                                             const std::vector<std::string>& no_decay);

// `decls` without the units whose parameters are all frozen (a LoRA run's units without adapters): the
// engine keeps no buffers for those and runs them as they are (unit_hooks.h, kFrozenUnit). A unit that
// claims no parameter at all stays, so that partition_into_units reports its prefixes.
std::vector<UnitDecl> units_with_trainable_params(torch::nn::Module& model, const std::vector<UnitDecl>& decls);

}  // namespace zest
