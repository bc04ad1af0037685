// diffusers' UNet folder as a folder format of the family (models/folder_format.h): config.json +
// diffusion_pytorch_model.safetensors (or its sharded index), alone or as a pipeline folder's unet/.
#pragma once

#include "models/folder_format.h"

namespace zest::unet {

// The format named "diffusers" (`zest merge --format diffusers`); its weights are safetensors under the
// model's own names, so the generic reader opens them.
FolderFormat diffusers_folder_format();

}  // namespace zest::unet
