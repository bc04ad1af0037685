// LoRA: the [lora] table, target matching, attaching, freezing and folding (see lora.h).
#include "models/common/lora.h"

#include "core/check.h"
#include "core/config_reader.h"
#include "core/config_writer.h"
#include "core/field_table.h"
#include "models/common/conv_layer.h"
#include "models/common/linear_layer.h"

#include <fnmatch.h>

#include <algorithm>

namespace zest {

const FieldTable<LoraConfig>& lora_fields() {
  static const FieldTable<LoraConfig> table = [] {
    using C = LoraConfig;
    FieldTable<C> t("lora", "low-rank adapters on a frozen base (peft's LoRA)",
                    {{"r", "zest calls it rank"},
                     {"lora_alpha", "zest calls it alpha"},
                     {"lora_dropout", "zest calls it dropout"},
                     {"targets", "zest calls it target_modules"}});
    const auto enabled = [](const C& c) { return c.enabled; };  // the other keys mean nothing without it
    t.boolean("enabled", &C::enabled, "train LoRA adapters instead of the whole model")
        .default_text("true when the table is present")
        .reference("train low-rank adapters on a frozen base instead of the whole model (see \"LoRA\" below)");
    t.integer("rank", &C::rank, "the adapters' inner width r")
        .at_least(1, "must be >= 1 (the adapters' inner width)")
        .written_when(enabled)
        .reference("the adapters' inner width r, at most each chosen layer's smaller width");
    t.number("alpha", &C::alpha, "scale = alpha / rank (0: alpha = rank)")
        .at_least(0, "must be >= 0 (0: equal to rank)")
        .written_when(enabled)
        .default_text("0.0 (= rank)")
        .reference("the adapters' output is scaled by alpha / rank; 0 takes alpha = rank (scale 1, what the diffusers "
                   "scripts set)");
    t.number("dropout", &C::dropout, "dropout on the adapters' inputs")
        .check_value([](double d) { return d >= 0.0 && d < 1.0; }, "must be in [0, 1)")
        .written_when(enabled)
        .type("float in [0, 1)")
        .reference("dropout on the adapters' inputs in training");
    t.list("target_modules", &C::target_modules, "layer names or globs to adapt ([]: the model family's defaults)")
        .check_value([](const std::vector<std::string>& targets) {
          return std::none_of(targets.begin(), targets.end(), [](const std::string& x) { return x.empty(); });
        }, "holds an empty name")
        .written_when(enabled)
        .default_text("[] (the family's defaults)")
        .reference("the layers to adapt, over the model's own state-dict names without `.weight`: a name matches a "
                   "layer named so or ending in `.` + name (peft's rule: `\"to_q\"`, `\"ff.net.2\"`, `\"conv1\"`); an "
                   "entry with `*`, `?` or `[` is a glob over the whole name (`\"down_blocks.*.to_k\"`). `[]`: the "
                   "family's defaults: UNet `to_q`, `to_k`, `to_v`, `to_out.0` (the attention projections, as the "
                   "diffusers script); HY-Motion `motion_qkv`, `text_qkv`, `motion_out_proj`, `text_out_proj` (double "
                   "blocks), `linear1`, `linear2` (single blocks), `self_attn_qkv`, `self_attn_proj` (text refiner). "
                   "Feed-forward layers (`ff.net.0.proj`, `ff.net.2`; HY-Motion `fc1`, `fc2`) and convolutions "
                   "(`conv1`, `conv2`, `conv_shortcut`, `proj_in`, `proj_out`, ...) can be added");
    return t;
  }();
  return table;
}

LoraConfig LoraConfig::from_toml(ConfigTable& table, bool present) {
  LoraConfig c;
  c.enabled = present;
  lora_fields().read(table, c);
  return c;
}

void to_toml(const LoraConfig& c, ConfigWriter& out) { lora_fields().write(c, out); }

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
