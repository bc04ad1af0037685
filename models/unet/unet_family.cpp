// Registry hook of the UNet: builds, counts and runs the model from reference-named config and inputs,
// and names its folder format (diffusers').
#include "models/unet/unet.h"
#include "models/unet/unet_activations.h"

#include "core/check.h"
#include "models/unet/diffusers_folder.h"
#include "models/unet/diffusion_objective.h"

#include <set>

namespace zest::unet {
namespace {

const std::set<std::string> kInputNames{"sample", "timestep", "encoder_hidden_states", "text_embeds",
                                        "time_ids"};

torch::Tensor input(const TensorMap& inputs, const std::string& name, bool is_required) {
  const auto it = inputs.find(name);
  if (it != inputs.end()) return it->second;
  if (is_required) {
    std::string given;
    for (const auto& [key, value] : inputs) given += (given.empty() ? "" : ", ") + key;
    ZEST_FAIL("UNet forward: input '", name, "' is missing (given: ", given, ")");
  }
  return {};
}

torch::Tensor forward_named(UnitModule& model, const TensorMap& inputs) {
  auto* unet = dynamic_cast<UNet2DConditionModel*>(&model);
  ZEST_CHECK(unet != nullptr, "UNet forward called on a model of another family");
  for (const auto& [key, value] : inputs) {
    ZEST_CHECK(kInputNames.count(key) != 0, "UNet forward: unknown input '", key,
               "' (expected sample, timestep, encoder_hidden_states, text_embeds, time_ids)");
  }
  const bool is_text_time = unet->config().text_time_embedding;
  UNetConditioning cond{input(inputs, "encoder_hidden_states", true),
                        input(inputs, "text_embeds", is_text_time),
                        input(inputs, "time_ids", is_text_time)};
  return unet->forward(input(inputs, "sample", true), input(inputs, "timestep", true), cond);
}

// The DDPM loss on a loader batch: `sample` holds the clean latents x0 (× scaling). The batch stays float32:
// x_t, the noise and the loss are float32 and the model casts to its compute dtype where diffusers does
// under autocast (docs/models.md 5).
torch::Tensor objective_loss(const DiffusionObjective& objective, UnitModule& model, const TensorMap& batch,
                             torch::Generator& generator) {
  auto* unet = dynamic_cast<UNet2DConditionModel*>(&model);
  ZEST_CHECK(unet != nullptr, "UNet training loss called on a model of another family");
  const bool is_text_time = unet->config().text_time_embedding;
  UNetConditioning cond{input(batch, "encoder_hidden_states", true), input(batch, "text_embeds", is_text_time),
                        input(batch, "time_ids", is_text_time)};
  return diffusion_loss(*unet, objective, input(batch, "sample", true), cond, generator);
}

// Epsilon prediction on SD's schedule, every option off.
torch::Tensor training_loss(UnitModule& model, const TensorMap& batch, torch::Generator& generator) {
  static const DiffusionObjective* const plain = new DiffusionObjective();  // never destroyed: see stable_diffusion()
  return objective_loss(*plain, model, batch, generator);
}

// [loss] over the pipeline's scheduler configuration (SD's without one), resolved once.
TrainingObjective make_training_loss(const LossConfig& loss, const std::string& pretrained) {
  const auto file = pipeline_scheduler_config(pretrained);
  const SchedulerConfig pipeline =
      file ? SchedulerConfig::from_file(*file, SchedulerConfig::Use::training) : SchedulerConfig::stable_diffusion();
  auto objective = std::make_shared<const DiffusionObjective>(diffusion_objective_for(loss, pipeline));
  const std::string schedule = file ? "the noise schedule of " + file->string() : std::string("SD's noise schedule");
  return {[objective](UnitModule& model, const TensorMap& batch, torch::Generator& generator) {
            return objective_loss(*objective, model, batch, generator);
          },
          describe(*objective) + " on " + schedule};
}

TensorMap synthetic_batch(UnitModule& model, const SyntheticShapes& shapes, int64_t batch, const torch::Device& device,
                          torch::Generator& generator) {
  auto* unet = dynamic_cast<UNet2DConditionModel*>(&model);
  ZEST_CHECK(unet != nullptr, "UNet synthetic batch asked of a model of another family");
  const UNetConfig& c = unet->config();
  const int64_t side = shapes.length > 0 ? shapes.length : 64;
  const int64_t tokens = shapes.text_tokens > 0 ? shapes.text_tokens : 77;
  const auto floats = torch::TensorOptions().dtype(torch::kFloat32).device(device);
  TensorMap b{{"sample", torch::randn({batch, c.in_channels, side, side}, generator, floats)},
              {"encoder_hidden_states", torch::randn({batch, tokens, c.cross_attention_dim.front()}, generator, floats)}};
  if (c.text_time_embedding) {
    const int64_t pooled = c.projection_class_embeddings_input_dim - 6 * c.addition_time_embed_dim;
    b["text_embeds"] = torch::randn({batch, pooled}, generator, floats);
    b["time_ids"] = torch::tensor({1024.0f, 1024.0f, 0.0f, 0.0f, 1024.0f, 1024.0f}, floats).repeat({batch, 1});
  }
  return b;
}

// channels = in_channels, text_dim = cross_attention_dim, and for SDXL-style "text_time" models
// pooled_dim = projection_class_embeddings_input_dim − 6·addition_time_embed_dim and time_ids = 1 (else
// 0 and 0). Height and width are open (the UNet is size-agnostic); their defaults: sample_size.
DatasetFeatures dataset_features(ConfigTable& table, const std::string& source) {
  const auto c = UNetConfig::from_toml(table);
  // sample_size is inert to the model (UNetConfig reads and drops it): read it directly.
  const int64_t sample_size = table.is_array("sample_size")
                                  ? table.get<std::vector<int64_t>>("sample_size", {64})[0]
                                  : table.get<int64_t>("sample_size", 64);
  ZEST_CHECK(!c.cross_attention_dim.empty(), source, ": cross_attention_dim is missing");
  for (int64_t dim : c.cross_attention_dim)
    ZEST_CHECK(dim == c.cross_attention_dim[0], source,
               ": per-block cross_attention_dim values differ; zest's latent datasets have one text width");
  DatasetFeatures e;
  e.format = "latents";
  const int64_t pooled =
      c.text_time_embedding ? c.projection_class_embeddings_input_dim - 6 * c.addition_time_embed_dim : 0;
  e.features = {{"channels", c.in_channels},
                {"text_dim", c.cross_attention_dim[0]},
                {"pooled_dim", pooled},
                {"time_ids", c.text_time_embedding ? 1 : 0}};
  e.defaults = {{"text_tokens", 77}, {"height", sample_size}, {"width", sample_size}};
  return e;
}

}  // namespace

ModelFamily family() {
  ModelFamily f;
  f.name = "unet";
  f.build = [](ConfigTable& table) -> std::shared_ptr<UnitModule> {
    return std::make_shared<UNet2DConditionModel>(UNetConfig::from_toml(table));
  };
  f.build_on_meta = [](ConfigTable& table) -> std::shared_ptr<UnitModule> {
    return std::make_shared<UNet2DConditionModel>(UNetConfig::from_toml(table), torch::TensorOptions().device(torch::kMeta));
  };
  f.count_parameters = [](ConfigTable& table) { return count_parameters(UNetConfig::from_toml(table)); };
  f.forward = forward_named;
  f.training_loss = training_loss;
  f.make_training_loss = make_training_loss;
  f.synthetic_batch = synthetic_batch;
  f.dataset_features = dataset_features;
  f.activation_profile = [](ConfigTable& table, const ActivationShapes& shapes) {
    return activation_profile(UNetConfig::from_toml(table), shapes);
  };
  f.folder_formats = {diffusers_folder_format()};
  // As diffusers' train_text_to_image_lora.py: the attention projections of every transformer block.
  f.lora_targets = {"to_q", "to_k", "to_v", "to_out.0"};
  f.lora_name_prefix = "unet.";  // diffusers' pipeline convention: load_lora_weights finds the UNet's layers
  return f;
}

}  // namespace zest::unet
