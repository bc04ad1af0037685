// Registry hook of HY-Motion: builds, counts and runs the model from reference-named config and inputs,
// and says what dataset it trains on and which folder format its releases come in.
#include "models/hymotion/hymotion.h"

#include "core/check.h"
#include "models/hymotion/flow_matching.h"
#include "models/hymotion/hymotion_activations.h"
#include "models/hymotion/release_folder.h"

#include <set>

namespace zest::hymotion {
namespace {

const torch::Tensor& input(const TensorMap& inputs, const std::string& name) {
  const auto it = inputs.find(name);
  if (it == inputs.end()) {
    std::string known;
    for (const auto& [key, value] : inputs) known += (known.empty() ? "" : ", ") + key;
    ZEST_FAIL("HY-Motion forward: input '", name, "' is missing (given: ", known, ")");
  }
  return it->second;
}

torch::Tensor forward_named(UnitModule& model, const TensorMap& inputs) {
  auto* hy = dynamic_cast<HyMotionModel*>(&model);
  ZEST_CHECK(hy != nullptr, "HY-Motion forward called on a model of another family");
  const std::set<std::string> expected = {"x", "ctxt_input", "vtxt_input", "timesteps", "x_mask_temporal",
                                          "ctxt_mask_temporal"};
  for (const auto& [key, value] : inputs)
    ZEST_CHECK(expected.count(key) != 0, "HY-Motion forward: unknown input '", key,
               "' (expected x, ctxt_input, vtxt_input, timesteps, x_mask_temporal, ctxt_mask_temporal)");
  return hy->forward({input(inputs, "x"), input(inputs, "ctxt_input"), input(inputs, "vtxt_input"),
                      input(inputs, "timesteps"), input(inputs, "x_mask_temporal"),
                      input(inputs, "ctxt_mask_temporal")});
}

// Flow-matching loss on a loader batch: `x` holds the clean (normalised) motion, padded frames masked.
// The batch stays float32: x_t and the target are formed in float32 and the model casts to its compute
// dtype where the reference does under autocast (docs/models.md 5).
torch::Tensor sampled_loss(const TimeSampling& sampling, UnitModule& model, const TensorMap& batch,
                           torch::Generator& generator) {
  auto* hy = dynamic_cast<HyMotionModel*>(&model);
  ZEST_CHECK(hy != nullptr, "HY-Motion training loss called on a model of another family");
  return flow_matching_loss(*hy, input(batch, "x"), input(batch, "ctxt_input"), input(batch, "vtxt_input"),
                            input(batch, "x_mask_temporal"), input(batch, "ctxt_mask_temporal"), generator, sampling,
                            packed_tokens_enabled() ? packed_tokens_of(batch) : nullptr);
}

torch::Tensor training_loss(UnitModule& model, const TensorMap& batch, torch::Generator& generator) {
  return sampled_loss(TimeSampling{}, model, batch, generator);
}

// [loss] for flow matching: only the flow-time range applies. The diffusion options have no standard form
// for a velocity objective (no noise schedule, so no SNR weighting, zero terminal SNR or offset noise) and
// are refused by name.
TrainingObjective make_training_loss(const LossConfig& loss, const std::string& /*pretrained*/) {
  const std::pair<const char*, bool> diffusion_only[] = {
      {"prediction", loss.prediction != "auto"},
      {"snr_gamma", loss.snr_gamma != 0.0},
      {"noise_offset", loss.noise_offset != 0.0},
      {"rescale_betas_zero_snr", loss.rescale_betas_zero_snr.value_or(false)},
      {"min_timestep", loss.min_timestep != 0},
      {"max_timestep", loss.max_timestep.has_value()},
  };
  for (const auto& [key, is_set] : diffusion_only) {
    ZEST_CHECK(!is_set, loss.key(key), " is a diffusion (UNet) option; HY-Motion trains a flow-matching velocity "
               "(data − noise) and takes only min_time / max_time, its flow-time range in [0, 1]");
  }
  TimeSampling sampling;
  sampling.min_time = loss.min_time;
  sampling.max_time = loss.max_time;
  return {[sampling](UnitModule& model, const TensorMap& batch, torch::Generator& generator) {
            return sampled_loss(sampling, model, batch, generator);
          },
          str("flow matching (velocity data − noise), flow times t in [", loss.min_time, ", ", loss.max_time, ")")};
}

// Valid lengths drawn uniformly from [min_length, length]: true for the first `len` positions.
torch::Tensor length_mask(int64_t batch, int64_t length, int64_t min_length, torch::Generator& generator,
                          const torch::Device& device) {
  const auto options = torch::TensorOptions().device(device);
  const auto lengths = torch::randint(min_length, length + 1, {batch, 1}, generator, options.dtype(torch::kLong));
  return torch::arange(length, options.dtype(torch::kLong)).unsqueeze(0) < lengths;
}

TensorMap synthetic_batch(UnitModule& model, const SyntheticShapes& shapes, int64_t batch, const torch::Device& device,
                          torch::Generator& generator) {
  auto* hy = dynamic_cast<HyMotionModel*>(&model);
  ZEST_CHECK(hy != nullptr, "HY-Motion synthetic batch asked of a model of another family");
  const HyMotionConfig& c = hy->config();
  const int64_t frames = shapes.length > 0 ? shapes.length : 360;
  const int64_t tokens = shapes.text_tokens > 0 ? shapes.text_tokens : 128;
  const auto floats = torch::TensorOptions().dtype(torch::kFloat32).device(device);
  return {{"x", torch::randn({batch, frames, c.input_dim}, generator, floats)},
          {"x_mask_temporal", length_mask(batch, frames, std::max<int64_t>(1, frames / 6), generator, device)},
          {"ctxt_input", torch::randn({batch, tokens, c.ctxt_input_dim}, generator, floats)},
          {"ctxt_mask_temporal", length_mask(batch, tokens, std::min<int64_t>(8, tokens), generator, device)},
          {"vtxt_input", torch::randn({batch, 1, c.vtxt_input_dim}, generator, floats)}};
}

// motion_dim = input_dim, text_dim = ctxt_input_dim, pooled_dim = vtxt_input_dim.
DatasetFeatures dataset_features(ConfigTable& table, const std::string&) {
  const auto c = HyMotionConfig::from_toml(table);
  DatasetFeatures e;
  e.format = "motion";
  e.features = {{"motion_dim", c.input_dim}, {"text_dim", c.ctxt_input_dim}, {"pooled_dim", c.vtxt_input_dim}};
  // The released models: Qwen3 tokens padded to 128, clips of up to 360 frames (12 s at 30 fps).
  // Small test configurations get small defaults so that they train on a CPU in seconds.
  const bool full_size = c.ctxt_input_dim >= 1024;
  e.defaults = {{"text_tokens", full_size ? 128 : 8},
                {"min_frames", full_size ? 60 : 12},
                {"max_frames", full_size ? 360 : 40}};
  return e;
}

}  // namespace

ModelFamily family() {
  ModelFamily f;
  f.name = "hymotion";
  f.build = [](ConfigTable& table) -> std::shared_ptr<UnitModule> {
    return std::make_shared<HyMotionModel>(HyMotionConfig::from_toml(table));
  };
  f.build_on_meta = [](ConfigTable& table) -> std::shared_ptr<UnitModule> {
    return std::make_shared<HyMotionModel>(HyMotionConfig::from_toml(table),
                                           Init{torch::TensorOptions().dtype(torch::kFloat32).device(torch::kMeta)});
  };
  f.count_parameters = [](ConfigTable& table) { return count_parameters(HyMotionConfig::from_toml(table)); };
  f.forward = forward_named;
  f.training_loss = training_loss;
  f.make_training_loss = make_training_loss;
  f.synthetic_batch = synthetic_batch;
  f.prepare_batch = [](TensorMap& batch) {
    if (packed_tokens_enabled()) add_packed_tokens(batch);
  };
  f.dataset_features = dataset_features;
  f.activation_profile = [](ConfigTable& table, const ActivationShapes& shapes) {
    return activation_profile(HyMotionConfig::from_toml(table), shapes);
  };
  f.folder_formats = {release_folder_format()};
  // The attention projections: the double blocks' per-stream qkv and out_proj, the single blocks' linear1
  // ([q | k | v | MLP half]) and linear2 ([attention | MLP] → D), the text refiner's self_attn_qkv and
  // self_attn_proj.
  f.lora_targets = {"motion_qkv", "text_qkv", "motion_out_proj", "text_out_proj",
                    "linear1",    "linear2",  "self_attn_qkv",   "self_attn_proj"};
  f.lora_name_prefix = "base_model.model.";  // a PeftModel's: peft's PeftModel.from_pretrained reads it
  return f;
}

}  // namespace zest::hymotion
