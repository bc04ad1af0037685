// LoRA fine-tuning of a model: the [lora] table (LoraConfig), choosing the layers to adapt by their
// state-dict names (peft's target_modules), attaching the adapters at the layers' seam (linear_layer.h,
// conv_layer.h), freezing every base parameter, and folding adapters into the base weights.
#pragma once

#include "models/common/low_rank_adapter.h"

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

namespace zest {

class ConfigTable;   // core/config_reader.h
class ConfigWriter;  // core/config_writer.h
template <typename C>
class FieldTable;  // core/field_table.h

// The [lora] table. Defaults as diffusers' text-to-image LoRA script (rank 4, alpha = rank, no dropout,
// the attention projections).
struct LoraConfig {
  bool enabled = false;
  int64_t rank = 4;
  double alpha = 0.0;    // 0: equal to rank (scale 1), as the diffusers scripts set lora_alpha = rank
  double dropout = 0.0;  // on the adapters' inputs, in training
  // Module names or patterns over the model's state-dict names (without ".weight"): a name matches a module
  // named so or ending in "." + name (peft's rule, e.g. "to_q", "ff.net.2"); an entry with '*' or '?' is a
  // glob over the whole module name (e.g. "down_blocks.*.to_q"). Empty: the family's defaults.
  std::vector<std::string> target_modules;

  double effective_alpha() const { return alpha > 0.0 ? alpha : static_cast<double>(rank); }
  LowRankShape shape() const { return {rank, effective_alpha(), dropout}; }
  static LoraConfig from_toml(ConfigTable& table, bool present);
};

void to_toml(const LoraConfig& config, ConfigWriter& out);
// The [lora] table (core/field_table.h); read into a config whose `enabled` says whether the table is present.
const FieldTable<LoraConfig>& lora_fields();

// A layer that can carry an adapter: a LinearLayer or a ConvLayer, found by its module name.
struct AdaptableLayer {
  std::string name;  // module name, e.g. "down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_q"
  torch::nn::Module* module = nullptr;
  bool is_conv = false;
  int64_t in = 0, out = 0;  // features (channels)
  LowRankAdapter* adapter() const;
  void attach(const LowRankShape& shape) const;
  void fold() const;
};

// Every Linear and Conv layer of `model` under its state-dict name, in registration order.
std::vector<AdaptableLayer> adaptable_layers(torch::nn::Module& model);

// Whether module `name` is chosen by target entry `target` (the rule LoraConfig::target_modules states).
bool target_matches(const std::string& target, const std::string& name);

// Adds adapters of `shape` to the layers `targets` choose (`source` names the setting in errors). Refused,
// before any is added: an entry that matches no layer (naming it and a few layer names), no target at all,
// a rank above a chosen layer's smaller width. Returns the adapted layers' names.
std::vector<std::string> attach_lora(torch::nn::Module& model, const std::vector<std::string>& targets,
                                     const LowRankShape& shape, const std::string& source);

// requires_grad = false on every parameter but the adapters' (lora_A / lora_B): the base stays frozen (the
// engine keeps it in the compute dtype outside its flat buffers: no master, no optimizer state, no gradient).
void freeze_all_but_adapters(torch::nn::Module& model);

// Whether a parameter name is an adapter's ("….lora_A.weight" / "….lora_B.weight").
bool is_adapter_parameter(const std::string& name);

// Sampling's --lora-scale: every adapter's output times `multiplier`.
void set_adapter_multiplier(torch::nn::Module& model, double multiplier);

// W += s·B·A on every adapted layer (for an export of the full model).
void fold_adapters(torch::nn::Module& model);

}  // namespace zest
