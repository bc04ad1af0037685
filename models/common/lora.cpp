// LoRA: the [lora] table, target matching, attaching, freezing and folding (see lora.h).
#include "models/common/lora.h"

#include "core/check.h"
#include "core/config_reader.h"
#include "core/config_writer.h"
#include "models/common/conv_layer.h"
#include "models/common/linear_layer.h"

#include <fnmatch.h>

#include <algorithm>

namespace zest {

LoraConfig LoraConfig::from_toml(ConfigTable& table, bool present) {
  LoraConfig c;
  c.enabled = table.get("enabled", present);
  c.rank = table.get("rank", c.rank);
  c.alpha = table.get("alpha", c.alpha);
  c.dropout = table.get("dropout", c.dropout);
  c.target_modules = table.get("target_modules", c.target_modules);
  table.reject_unknown_keys({{"r", "zest calls it rank"},
                             {"lora_alpha", "zest calls it alpha"},
                             {"lora_dropout", "zest calls it dropout"},
                             {"targets", "zest calls it target_modules"}});
  if (c.rank < 1) table.fail("rank", "must be >= 1 (the adapters' inner width)");
  if (c.alpha < 0.0) table.fail("alpha", "must be >= 0 (0: equal to rank)");
  if (!(c.dropout >= 0.0 && c.dropout < 1.0)) table.fail("dropout", "must be in [0, 1)");
  for (const std::string& target : c.target_modules)
    if (target.empty()) table.fail("target_modules", "holds an empty name");
  return c;
}

void to_toml(const LoraConfig& c, ConfigWriter& out) {
  ConfigWriter& t = out.table("lora", "low-rank adapters on a frozen base (peft's LoRA)");
  t.set("enabled", c.enabled, "train LoRA adapters instead of the whole model");
  if (!c.enabled) return;  // the other keys mean nothing without it
  t.set("rank", c.rank, "the adapters' inner width r");
  t.set("alpha", c.alpha, "scale = alpha / rank (0: alpha = rank)");
  t.set("dropout", c.dropout, "dropout on the adapters' inputs");
  t.set("target_modules", c.target_modules, "layer names or globs to adapt ([]: the model family's defaults)");
}

LowRankAdapter* AdaptableLayer::adapter() const {
  return is_conv ? static_cast<ConvLayer*>(module)->adapter() : static_cast<LinearLayer*>(module)->adapter();
}

void AdaptableLayer::attach(const LowRankShape& shape) const {
  if (is_conv) return static_cast<ConvLayer*>(module)->attach_adapter(shape);
  static_cast<LinearLayer*>(module)->attach_adapter(shape);
}

void AdaptableLayer::fold() const {
  if (is_conv) return static_cast<ConvLayer*>(module)->fold_adapter_into_weight();
  static_cast<LinearLayer*>(module)->fold_adapter_into_weight();
}

std::vector<AdaptableLayer> adaptable_layers(torch::nn::Module& model) {
  std::vector<AdaptableLayer> layers;
  for (const auto& item : model.named_modules()) {
    torch::nn::Module* module = item.value().get();
    if (auto* linear = dynamic_cast<LinearLayer*>(module)) {
      layers.push_back({item.key(), module, false, linear->in_features(), linear->out_features()});
    } else if (auto* conv = dynamic_cast<ConvLayer*>(module)) {
      layers.push_back({item.key(), module, true, conv->in_features(), conv->out_features()});
    }
  }
  return layers;
}

bool target_matches(const std::string& target, const std::string& name) {
  if (target.find_first_of("*?[") != std::string::npos) return fnmatch(target.c_str(), name.c_str(), 0) == 0;
  if (name == target) return true;
  return name.size() > target.size() && name.compare(name.size() - target.size(), target.size(), target) == 0 &&
         name[name.size() - target.size() - 1] == '.';
}

namespace {

std::string some_names(const std::vector<AdaptableLayer>& layers) {
  std::string names;
  const size_t shown = std::min<size_t>(layers.size(), 6);
  for (size_t i = 0; i < shown; ++i) names += (i ? ", " : "") + layers[i].name;
  return names + (layers.size() > shown ? str(", ... (", layers.size(), " layers)") : "");
}

}  // namespace

std::vector<std::string> attach_lora(torch::nn::Module& model, const std::vector<std::string>& targets,
                                     const LowRankShape& shape, const std::string& source) {
  if (targets.empty()) throw Error(str(source, ": no target modules (name the layers to adapt in target_modules)"));
  if (shape.rank < 1) throw Error(str(source, ": rank must be >= 1, got ", shape.rank));
  const std::vector<AdaptableLayer> layers = adaptable_layers(model);
  std::vector<const AdaptableLayer*> chosen;
  for (const std::string& target : targets) {
    bool matched = false;
    for (const AdaptableLayer& layer : layers) {
      if (!target_matches(target, layer.name)) continue;
      matched = true;
      if (std::find(chosen.begin(), chosen.end(), &layer) == chosen.end()) chosen.push_back(&layer);
    }
    if (!matched) throw Error(str(source, ": target_modules entry \"", target, "\" matches no Linear or Conv layer of the "
               "model (a name matches a layer named so or ending in \".", target, "\"; a glob with * matches the "
               "whole name; the model's layers: ", some_names(layers), ")"));
  }
  for (const AdaptableLayer* layer : chosen) {
    const int64_t width = std::min(layer->in, layer->out);
    if (shape.rank > width) throw Error(str(source, ": rank ", shape.rank, " is above the width of layer ", layer->name,
               " (", layer->in, " in, ", layer->out, " out); use rank <= ", width, " or leave that layer out"));
  }
  std::vector<std::string> names;
  for (const AdaptableLayer* layer : chosen) {  // in target order; the parameters register in model order
    layer->attach(shape);
    names.push_back(layer->name);
  }
  return names;
}

bool is_adapter_parameter(const std::string& name) {
  const auto ends_with = [&](const std::string& suffix) {
    return name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  return ends_with(".lora_A.weight") || ends_with(".lora_B.weight");
}

void freeze_all_but_adapters(torch::nn::Module& model) {
  for (auto& item : model.named_parameters()) item.value().set_requires_grad(is_adapter_parameter(item.key()));
}

void set_adapter_multiplier(torch::nn::Module& model, double multiplier) {
  for (const AdaptableLayer& layer : adaptable_layers(model))
    if (LowRankAdapter* adapter = layer.adapter()) adapter->set_multiplier(multiplier);
}

void fold_adapters(torch::nn::Module& model) {
  for (const AdaptableLayer& layer : adaptable_layers(model))
    if (layer.adapter() != nullptr) layer.fold();
}

}  // namespace zest
