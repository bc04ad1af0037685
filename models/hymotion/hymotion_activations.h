// Activation profile of HY-Motion (see engine/activation_memory.h): per unit and per sample, the bytes
// its forward keeps for backward, counted from the block structure and the data's frame and token counts.
#pragma once

#include "engine/activation_memory.h"
#include "models/hymotion/hymotion_config.h"

namespace zest::hymotion {

ActivationProfile activation_profile(const HyMotionConfig& config, const ActivationShapes& shapes);

}  // namespace zest::hymotion
