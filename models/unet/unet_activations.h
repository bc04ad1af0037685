// Activation profile of the UNet (see engine/activation_memory.h): per unit and per sample, the bytes its
// forward keeps for backward, walked level by level as unet_model.cpp runs the blocks.
#pragma once

#include "engine/activation_memory.h"
#include "models/unet/unet_config.h"

namespace zest::unet {

ActivationProfile activation_profile(const UNetConfig& config, const ActivationShapes& shapes);

}  // namespace zest::unet
