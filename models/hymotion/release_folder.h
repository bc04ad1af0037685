// HY-Motion's released folder as a folder format of the family (models/folder_format.h): recognised by
// config.yml + latest.ckpt, its network read under "motion_transformer.", its pipeline tensors carried
// from a checkpoint's model_source record to an export.
#pragma once

#include "models/folder_format.h"

namespace zest::hymotion {

// The format named "hymotion" (`zest merge --format hymotion`).
FolderFormat release_folder_format();

}  // namespace zest::hymotion
