// A model's weights are checked against the machine before the model is built: a configuration whose
// parameters cannot fit in the host's memory (or, to be moved to a device, in its free memory) is refused
// naming the configuration, its largest size fields and the bytes, instead of allocating until the
// machine runs out. The count comes from the family's count_parameters (meta tensors: nothing allocated).
#pragma once

#include "core/config_reader.h"
#include "models/model_resolve.h"
#include "models/registry.h"

#include <torch/torch.h>

#include <cstdint>
#include <string>

namespace zest {

// The configuration's largest integer fields, largest first ("feat_dim = 65536, num_layers = 999"): the
// keys that set a model's size, for the refusal. An array counts with its largest element.
std::string largest_size_fields(const ConfigTable& config, size_t count = 3);

// "" when `parameters` elements of `element_bytes` fit in `available_bytes` (negative: unknown, not
// checked); else the refusal, naming `source`, the fields, the count, the bytes and `memory` (what
// was compared: "the host's available memory (MemAvailable)", "the free memory of cuda:0").
std::string model_memory_problem(const std::string& source, const std::string& fields, int64_t parameters,
                                 int64_t element_bytes, int64_t available_bytes, const std::string& memory);

// Throws zest::Error when the float32 weights `family` would build from `config` exceed the host's
// available memory (reading the table as the family's build does: its errors are the build's).
void check_model_fits_host(const ModelFamily& family, ConfigTable& config);

// Throws zest::Error when the parameters of `meta_module` (built on the meta device: nothing allocated),
// `element_bytes` each, exceed the host's available memory. For the pipeline parts read from a
// config.json (text encoders, VAE); `fields` names their size fields ("num_hidden_layers = 256, ...").
void check_module_fits_host(const std::string& source, const std::string& fields, const torch::nn::Module& meta_module,
                            int64_t element_bytes);

// Throws zest::Error when `model`'s weights in `dtype` exceed the free memory of `device` (a CUDA
// device; elsewhere nothing is checked beyond the host check build_model makes).
void check_model_fits_device(const ResolvedModel& model, const torch::Device& device, torch::Dtype dtype);

}  // namespace zest
