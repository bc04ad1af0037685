// HY-Motion's released folder as a folder format of the family (models/folder_format.h): recognised by
// config.yml + latest.ckpt, its network read under "motion_transformer.", its pipeline tensors carried
// from a checkpoint's model_source record to an export.
#pragma once

#include "models/folder_format.h"

#include <torch/torch.h>

#include <map>
#include <string>

namespace zest::hymotion {

// The format named "hymotion" (`zest merge --format hymotion`).
FolderFormat release_folder_format();

// A release's pipeline tensors (release_pipeline_tensor_names(): learned null and special text features,
// motion mean/std) as latest.ckpt stores them, by name; those it lacks are absent.
std::map<std::string, torch::Tensor> read_release_pipeline_tensors(const std::string& weights_file);

}  // namespace zest::hymotion
