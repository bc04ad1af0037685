// State dicts in safetensors files: loading a file into a module's existing parameters and buffers
// (strict key and shape checking, dtype conversion) and saving a module under its state-dict names.
#pragma once

#include "formats/safetensors.h"

#include <torch/torch.h>

#include <optional>
#include <string>
#include <vector>

namespace zest {

struct LoadOptions {
  // Strict: any missing key (a module tensor absent from the file) or unexpected key (a file tensor
  // the module lacks) is an error. Wrong shapes are errors either way.
  bool strict = true;
  // File keys are PREFIX + state-dict name (e.g. "param." in golden files); keys without the prefix
  // are not part of the state dict and are ignored.
  std::string prefix;
  // Stored values are converted to each module tensor's dtype; when false a dtype difference is an error.
  bool convert_dtype = true;
};

// What a load did (non-strict loads report what they skipped).
struct LoadReport {
  std::vector<std::string> loaded;
  std::vector<std::string> missing;     // module tensors not in the file (left unchanged)
  std::vector<std::string> unexpected;  // file tensors (after the prefix) the module does not have
};

// Copies the file's tensors into `module`'s parameters and buffers (named as module.named_parameters()
// and named_buffers()) under no-grad, keeping their device and dtype. Errors name the file and list all
// offending keys of each kind (the first few and the count); nothing is copied when a check fails.
LoadReport load_state_dict(torch::nn::Module& module, const safetensors::Reader& reader,
                           const LoadOptions& options = {});

// Writes the module's parameters and buffers with exactly their state-dict names; floating tensors are
// converted to `dtype` when given. The file is replaced atomically (safetensors::save_file).
void save_state_dict(const torch::nn::Module& module, const std::string& path,
                     std::optional<torch::Dtype> dtype = std::nullopt);

}  // namespace zest
