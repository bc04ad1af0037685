// Exporting a checkpoint for inference in the layout its users load: one safetensors file (zest's
// default) or a family's folder format (models/folder_format.h: a diffusers UNet folder for
// `UNet2DConditionModel.from_pretrained(DIR)`, HY-Motion's released folder for its own loader). A
// checkpoint of a run that started from such a folder carries that folder's config (and what the format
// keeps besides, a release's pipeline tensors) through unchanged.
#pragma once

#include "checkpoint/merge.h"

#include <string>

namespace zest {

// `zest merge --format lora`: a LoRA run's adapters as peft/diffusers name them (models/lora_file.h).
inline constexpr const char* kLoraFormat = "lora";

// "safetensors", "lora" or a family's folder format name ("diffusers", "hymotion"), returned as given; the
// error lists them.
std::string parse_export_format(const std::string& name);

// `ckpt`: a step folder or a checkpoint root (its latest). A LoRA run's checkpoint: lora writes its
// adapters (a .safetensors file, or a folder that receives pytorch_lora_weights.safetensors), safetensors
// and a folder format with one safetensors weights file write its base with the adapters folded in. safetensors: `out` is the file
// (checkpoint::merge_offline). A folder format: `out` is a folder (created) that receives the weights
// and then the config file (diffusers weights are sharded with diffusers' index past
// options.shard_size_bytes). Weights stream piece by piece; every file is written under a temporary name
// and renamed when complete. options.ema exports the EMA of the weights (refused before anything is
// written when the checkpoint has none).
checkpoint::MergeResult export_checkpoint(const std::string& ckpt, const std::string& out,
                                          const checkpoint::MergeOptions& options, const std::string& format);

}  // namespace zest
