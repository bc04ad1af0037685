// HY-Motion's sampling (pipelines/family_pipeline.h): `zest sample` on a release folder (motions from a prompt,
// cached text features or random text) and a HY-Motion run's validation motions ([sample]: the prompts encoded
// once by the release's text encoders, .npy + skeleton GIFs per prompt).
#pragma once

#include "pipelines/family_pipeline.h"

namespace zest {

FamilyPipeline motion_family_pipeline();

}  // namespace zest
