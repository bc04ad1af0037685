// Exporting a checkpoint for inference in the layout its users load: one safetensors file (zest's
// default), a diffusers UNet folder (`UNet2DConditionModel.from_pretrained(DIR)`), or HY-Motion's released
// folder (config.yml + latest.ckpt for its own loader). A checkpoint of a run that started from such a
// folder carries that folder's config (and a release's pipeline tensors) through unchanged.
#pragma once

#include "checkpoint/merge.h"

#include <string>

namespace zest {

enum class ExportFormat { safetensors, diffusers, hymotion };

// "safetensors" | "diffusers" | "hymotion" (error lists them).
ExportFormat parse_export_format(const std::string& name);

// `ckpt`: a step folder or a checkpoint root (its latest). safetensors: `out` is the file
// (checkpoint::merge_offline). diffusers / hymotion: `out` is a folder (created) that receives the config
// file and the weights; diffusers weights are sharded with diffusers' index past options.shard_size_bytes.
// Weights stream piece by piece; every file is written under a temporary name and renamed when complete.
// options.ema exports the EMA of the weights (refused before anything is written when the checkpoint has none).
checkpoint::MergeResult export_checkpoint(const std::string& ckpt, const std::string& out,
                                          const checkpoint::MergeOptions& options, ExportFormat format);

}  // namespace zest
