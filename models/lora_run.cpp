// A LoRA run's model, its checkpoint record and its counts (see lora_run.h).
#include "models/lora_run.h"

#include "core/check.h"

#include <cstdio>
#include <filesystem>

namespace zest {

nlohmann::json LoraRecord::to_json() const {
  return {{"rank", rank}, {"alpha", alpha}, {"dropout", dropout}, {"layers", layers},
          {"pretrained", pretrained}, {"seed", seed}};
}

LoraRecord LoraRecord::from_json(const JsonField& record) {
  LoraRecord r;
  r.rank = record.at("rank").integer(1);
  r.alpha = record.at("alpha").number(NumberRange::positive());
  r.dropout = record.at("dropout").number_or(0.0, NumberRange{0.0, 1.0, false, true});  // [0, 1)
  r.layers = record.at("layers").strings();
  if (r.layers.empty()) record.at("layers").fail("is empty; a LoRA run adapts at least one layer");
  r.pretrained = record.at("pretrained").string_or("");
  r.seed = record.at("seed").integer_or(0);
  return r;
}

std::vector<std::string> lora_targets(const LoraConfig& config, const ModelFamily& family) {
  if (!config.target_modules.empty()) return config.target_modules;
  if (family.lora_targets.empty()) throw Error(str("[lora] target_modules: the ", family.name,
             " family has no default LoRA targets; name the layers to adapt"));
  return family.lora_targets;
}

namespace {

std::vector<std::string> adapted_in_model_order(torch::nn::Module& model) {
  std::vector<std::string> names;
  for (const AdaptableLayer& layer : adaptable_layers(model))
    if (layer.adapter() != nullptr) names.push_back(layer.name);
  return names;
}

}  // namespace

LoraRecord prepare_lora_model(torch::nn::Module& model, const LoraConfig& config, const ResolvedModel& resolved,
                              int64_t seed, Communicator& comm) {
  attach_lora(model, lora_targets(config, *resolved.family), config.shape(), "[lora] target_modules");
  freeze_all_but_adapters(model);
  // The base's path made absolute: merges and sampling may run from another folder.
  const std::string base = resolved.pretrained.empty() ? "" : std::filesystem::absolute(resolved.pretrained).string();
  LoraRecord record{config.rank, config.effective_alpha(), config.dropout, adapted_in_model_order(model), base, seed};
  if (comm.rank() == 0) {
    int64_t trainable = 0, frozen = 0;
    for (const auto& p : model.parameters()) (p.requires_grad() ? trainable : frozen) += p.numel();
    // On stderr: `zest bench`'s stdout is its one JSON line.
    std::fprintf(stderr, "lora: rank %lld, alpha %g on %zu layers: %lld trainable parameters, %lld frozen\n",
                 static_cast<long long>(config.rank), config.effective_alpha(), record.layers.size(),
                 static_cast<long long>(trainable), static_cast<long long>(frozen));
  }
  return record;
}

ParameterCounts count_lora_parameters(const ResolvedModel& resolved, const LoraConfig& config) {
  ZEST_CHECK(resolved.family->build_on_meta != nullptr, "[lora]: model family '", resolved.family->name,
             "' cannot build its model on the meta device (ModelFamily::build_on_meta), which counting the "
             "adapters needs");
  ConfigTable table = model_config_table(resolved);
  const std::shared_ptr<UnitModule> model = resolved.family->build_on_meta(table);
  attach_lora(*model, lora_targets(config, *resolved.family), config.shape(), "[lora] target_modules");
  ParameterCounts counts;
  for (const auto& item : model->named_parameters())
    (is_adapter_parameter(item.key()) ? counts.trainable : counts.frozen) += item.value().numel();
  return counts;
}

}  // namespace zest
