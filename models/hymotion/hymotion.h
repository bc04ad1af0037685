// Public entry point of the HY-Motion model family: configuration, model, training objective and
// the registry hook (zest::hymotion::family()).
#pragma once

#include "models/hymotion/flow_matching.h"
#include "models/hymotion/hymotion_config.h"
#include "models/hymotion/hymotion_model.h"
#include "models/registry.h"

namespace zest::hymotion {

// name "hymotion"; build / count_parameters read a model-config table (reference field names);
// forward takes the golden files' input names (x, ctxt_input, vtxt_input, timesteps, x_mask_temporal,
// ctxt_mask_temporal).
ModelFamily family();

}  // namespace zest::hymotion
