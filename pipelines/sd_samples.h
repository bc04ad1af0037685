// Stable Diffusion's sampling (pipelines/family_pipeline.h), the UNet family's: `zest sample` on a pipeline
// folder (pictures from a prompt, a grid for several) and a UNet run's validation grids ([sample]: the run's
// pipeline folder, with the UNet being trained, or the pipeline's own with a LoRA run's adapters on it).
#pragma once

#include "pipelines/family_pipeline.h"

namespace zest {

FamilyPipeline sd_family_pipeline();

}  // namespace zest
