// LoRA files as peft and diffusers write and read them: "<prefix><layer>.lora_A.weight" / ".lora_B.weight"
// (prefix "unet." for the UNet, diffusers' pipeline convention; "base_model.model." for HY-Motion, a
// PeftModel's), with peft's LoraConfig in the safetensors metadata "lora_adapter_metadata" under the same
// prefix (r, lora_alpha, target_modules, ...: what diffusers' load_lora_weights passes to LoraConfig). Also
// the exports of a LoRA run's checkpoint: the adapters alone, or folded into the base (W + (alpha/r)·B·A).
#pragma once

#include "checkpoint/merge.h"
#include "models/lora_run.h"

#include <torch/torch.h>

#include <map>
#include <string>

namespace zest {

// The file diffusers' load_lora_weights(DIR) reads from a folder.
inline constexpr const char* kLoraFileName = "pytorch_lora_weights.safetensors";

// The family's ModelFamily::lora_name_prefix: "unet." or "base_model.model.".
std::string lora_name_prefix(const std::string& family);
// The safetensors metadata of a LoRA file: peft's config as diffusers writes it.
std::map<std::string, std::string> lora_file_metadata(const std::string& family, const LoraRecord& record);

struct LoadedLora {
  int64_t layers = 0;
  int64_t rank = 0;     // of the first layer (all equal in zest's files)
  double alpha = 0.0;
};

// Attaches the adapters of `path` to `model` (of family `family`) with their values, output times
// `multiplier` (--lora-scale). `path`: a LoRA file, a folder holding kLoraFileName, or a LoRA run's
// checkpoint (a root, DIR/latest or a step folder). Refused before any adapter is attached, each with one
// message naming the file: tensors that are not LoRA factors, a layer the model does not have or of
// another shape (a file for another model), a factor without its pair, a checkpoint of a run without
// [lora].
LoadedLora load_lora(torch::nn::Module& model, const std::string& family, const std::string& path, double multiplier);

// The values of `path` (as load_lora takes it) put into the adapters that load_lora attached from a file of
// the same layers, ranks and alphas, e.g. a later step of the same run: what a validation round does instead of
// loading the pipeline anew. The multiplier stays. Refused before any value changes, naming the file, where a
// layer has no adapter or one of another rank or alpha, or the model has adapters the file does not fill.
LoadedLora load_lora_values(torch::nn::Module& model, const std::string& family, const std::string& path);

// The LoRA record of a checkpoint's manifest, or an error naming `step_dir` when its run had no [lora].
LoraRecord lora_record_of_checkpoint(const std::string& step_dir);
bool is_lora_checkpoint(const std::string& step_dir);

// `zest merge --format lora`: `out` is a file (*.safetensors) or a folder that receives kLoraFileName.
checkpoint::MergeResult export_lora_file(const std::string& ckpt, const std::string& out,
                                         checkpoint::MergeOptions options);

// The full model of a LoRA checkpoint with its adapters folded in (base from the record's pretrained weights
// or seeded initialisation, fp32 on the host), under the model's own names: what `zest merge` writes for
// --format safetensors / diffusers.
std::shared_ptr<UnitModule> folded_lora_model(const std::string& step_dir, bool ema);

}  // namespace zest
