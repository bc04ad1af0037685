// Helpers of the LoRA tests: the tiny models of both families built from their built-in configurations,
// a fixed batch of their forward inputs (sliced per rank), and the adapters' values by name.
#pragma once

#include "core/config_reader.h"
#include "engine/unit_module.h"
#include "models/common/lora.h"
#include "models/registry.h"

#include <torch/torch.h>

#include <map>
#include <memory>
#include <string>

namespace zest::lora_test {

inline const ModelFamily& family_of_flavor(const std::string& flavor) {
  return model_family(builtin_model_config(flavor).family);
}

// The flavor's model, initialised from `seed` as the trainer does. HY-Motion zero-initialises its
// modulations and final layer (the untrained network's output is zero, and so is every gradient upstream
// of a frozen zero layer): those get small random values here, as a pretrained base has.
inline std::shared_ptr<UnitModule> tiny_model(const std::string& flavor, int64_t seed = 3) {
  torch::manual_seed(static_cast<uint64_t>(seed));
  ConfigTable table = ConfigTable::parse_string(builtin_model_config(flavor).toml_text, flavor);
  std::shared_ptr<UnitModule> model = family_of_flavor(flavor).build(table);
  if (family_of_flavor(flavor).name != "hymotion") return model;  // the UNet is built as the trainer builds it
  torch::NoGradGuard no_grad;
  for (auto& p : model->parameters())
    if (p.numel() > 1 && p.abs().max().item<double>() == 0.0) p.normal_(0.0, 0.1);
  return model;
}

// Forward inputs of `batch` samples (small shapes), the same on every rank for the same seed.
inline TensorMap fixed_inputs(const std::string& flavor, UnitModule& model, int64_t batch, uint64_t seed) {
  auto generator = at::detail::createCPUGenerator(seed);
  const ModelFamily& family = family_of_flavor(flavor);
  TensorMap inputs = family.synthetic_batch(model, {8, 4}, batch, torch::kCPU, generator);
  const auto t = torch::randint(1, 999, {batch}, generator, torch::TensorOptions().dtype(torch::kFloat32));
  inputs[family.name == "unet" ? "timestep" : "timesteps"] = family.name == "unet" ? t : t / 1000.0;
  return inputs;
}

inline TensorMap slice(const TensorMap& inputs, int64_t begin, int64_t count) {
  TensorMap part;
  for (const auto& [name, value] : inputs) part[name] = value.narrow(0, begin, count);
  return part;
}

inline torch::Tensor forward(const std::string& flavor, UnitModule& model, const TensorMap& inputs) {
  return family_of_flavor(flavor).forward(model, inputs);
}

// name → a copy of every parameter whose name passes `keep`.
template <typename Keep>
std::map<std::string, torch::Tensor> parameters_where(torch::nn::Module& model, Keep keep) {
  std::map<std::string, torch::Tensor> out;
  for (const auto& item : model.named_parameters())
    if (keep(item.key())) out[item.key()] = item.value().detach().clone();
  return out;
}

inline std::map<std::string, torch::Tensor> adapters_of(torch::nn::Module& model) {
  return parameters_where(model, [](const std::string& name) { return is_adapter_parameter(name); });
}

inline std::map<std::string, torch::Tensor> base_of(torch::nn::Module& model) {
  return parameters_where(model, [](const std::string& name) { return !is_adapter_parameter(name); });
}

}  // namespace zest::lora_test
