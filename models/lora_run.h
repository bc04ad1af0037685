// A LoRA run's model (models/common/lora.h does the layers): the family's default targets, adapters
// attached and the base frozen, the record a checkpoint keeps of them (so merges and sampling know rank,
// alpha and the adapted layers), and the parameter counts `zest estimate` and the pre-flight check use.
#pragma once

#include "comm/communicator.h"
#include "formats/json_field.h"
#include "models/common/lora.h"
#include "models/model_resolve.h"

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

namespace zest {

// What a checkpoint's extra record "lora" holds.
struct LoraRecord {
  int64_t rank = 0;
  double alpha = 0.0;
  double dropout = 0.0;
  std::vector<std::string> layers;  // the adapted layers' module names, in model order
  std::string pretrained;           // the base's [model] pretrained ("" = the seeded initialisation)
  int64_t seed = 0;                 // train.seed: the base's initialisation when no pretrained weights

  nlohmann::json to_json() const;
  // The record read back (extra.lora of a checkpoint's manifest); errors name the manifest and the field.
  static LoraRecord from_json(const JsonField& record);
};

// The target entries of a run: [lora] target_modules, or the family's defaults when empty.
std::vector<std::string> lora_targets(const LoraConfig& config, const ModelFamily& family);

// Attaches the run's adapters to `model` (built, pretrained weights loaded) and freezes the base; rank 0
// says how many layers and parameters train. Errors (a target matching nothing, a rank above a layer's
// width) name the [lora] key.
LoraRecord prepare_lora_model(torch::nn::Module& model, const LoraConfig& config, const ResolvedModel& resolved,
                              int64_t seed, Communicator& comm);

struct ParameterCounts {
  int64_t trainable = 0;
  int64_t frozen = 0;
};
// Of the model with the run's adapters, from its shapes alone (built on the meta device).
ParameterCounts count_lora_parameters(const ResolvedModel& resolved, const LoraConfig& config);

}  // namespace zest
