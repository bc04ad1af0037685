// A released Qwen3 folder (config.json + model.safetensors, or model-0000N-of-0000M.safetensors with
// model.safetensors.index.json, as save_pretrained writes them) loaded into the decoder stack: checked against
// the machine's memory before anything is allocated, then streamed tensor by tensor into the parameters in the
// asked-for dtype (bf16 on a GPU: Qwen3-8B's 16 GB), strictly by name.
#pragma once

#include "models/qwen3/qwen3_model.h"

#include <torch/torch.h>

#include <filesystem>
#include <string>

namespace zest::qwen3 {

// The weights file of a folder: model.safetensors.index.json when present, else model.safetensors; an error
// naming the folder and what it holds when it is neither a folder nor one with config.json and weights.
std::string qwen3_weights_file(const std::filesystem::path& folder);

// Builds and loads the model (eval mode). Stored names are Qwen3ForCausalLM's ("model." + the stack's names);
// lm_head.weight and rotary inv_freq buffers are passed over. Any missing, unexpected or mis-shaped tensor is
// named in one error.
Qwen3Model load_qwen3_model(const std::filesystem::path& folder, torch::Device device, torch::Dtype dtype);

}  // namespace zest::qwen3
