// Public entry point of the UNet model family (diffusers UNet2DConditionModel, SD1.5/SDXL):
// configuration, model, training objective, sampler and the registry hook (zest::unet::family()).
#pragma once

#include "models/registry.h"
#include "models/unet/ddim.h"
#include "models/unet/ddpm.h"
#include "models/unet/unet_config.h"
#include "models/unet/unet_model.h"

namespace zest::unet {

// name "unet"; build / count_parameters read a model-config table (diffusers' config.json field
// names); forward takes the golden files' input names (sample, timestep, encoder_hidden_states, and
// for "text_time" models text_embeds, time_ids).
ModelFamily family();

}  // namespace zest::unet
