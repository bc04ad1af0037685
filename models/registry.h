// Model registry: the families zest can train (HY-Motion, UNet, and any registered with
// register_model_family), looked up by name, with the folder formats each reads and exports, and the built-in
// configurations (configs/models/*.toml) looked up by flavor name. docs/design.md "How to add a model family".
#pragma once

#include "core/config_reader.h"
#include "engine/activation_memory.h"
#include "engine/unit_module.h"
#include "models/folder_format.h"
#include "models/loss_config.h"

#include <torch/torch.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace zest {

using TensorMap = std::map<std::string, torch::Tensor>;
// A training objective on one loader batch (ModelFamily::training_loss has the shape).
using TrainingLoss = std::function<torch::Tensor(UnitModule& model, const TensorMap& batch, torch::Generator& generator)>;
// A run's objective and its one-line description for the log ("v_prediction, min-SNR γ 5, ...").
struct TrainingObjective {
  TrainingLoss loss;
  std::string description;
};

// Shapes of a synthetic batch (benchmarks): 0 takes the family's default — HY-Motion: 360 frames
// (valid lengths 60..360) and 128 text tokens (8..128); UNet: 64×64 latents and 77 text tokens.
struct SyntheticShapes {
  int64_t length = 0;       // motion frames, or the latent side
  int64_t text_tokens = 0;
};

// What a family's models train on (docs/data_formats.md): the dataset kind and the feature widths a
// configuration fixes (dataset.json must hold the same) or leaves open (defaults for `zest data synth`).
struct DatasetFeatures {
  std::string format;                       // "motion" (clips) or "latents" (image latents)
  std::map<std::string, int64_t> features;  // e.g. motion_dim = input_dim
  std::map<std::string, int64_t> defaults;  // open widths: text_tokens, height/width, min/max_frames
};

// Everything family-specific, filled by the family's own family() (models/<family>/<family>_family.cpp).
// Required: name, build, count_parameters, forward, training_loss, make_training_loss, dataset_features.
// Optional (what needs one says so when it is empty): build_on_meta ([lora]'s counts), synthetic_batch
// (`zest bench`), prepare_batch, activation_profile (the pre-flight activation check, skipped without it),
// folder_formats, lora_targets, lora_name_prefix (peft's by default). Sampling ([sample], `zest sample`) lives
// above models/, in pipelines/ and train/validation_samples.cpp, for the built-in families only.
struct ModelFamily {
  // "hymotion", "unet": lowercase letters and digits, the start of its configurations' names
  // (configs/models/<name>_*.toml, a model file <name>_*.toml) and model.family's value.
  std::string name;
  // Builds a model from a model-configuration table whose keys are the reference configuration's field
  // names (unknown keys are errors, unsupported values are errors naming the key). Parameters are
  // initialised as the reference does.
  std::function<std::shared_ptr<UnitModule>(ConfigTable& config)> build;
  // The same model with its parameters on the meta device (shapes only, nothing allocated or drawn).
  std::function<std::shared_ptr<UnitModule>(ConfigTable& config)> build_on_meta;
  // Exact parameter count of a configuration, computed without allocating the parameters.
  std::function<int64_t(ConfigTable& config)> count_parameters;
  // Runs the forward pass on reference-named inputs (golden files' "input.*" keys without the prefix)
  // and returns the model output.
  std::function<torch::Tensor(UnitModule& model, const TensorMap& inputs)> forward;
  // The training objective on one batch from the data loader (see docs/data_formats.md for the keys:
  // HY-Motion x, x_mask_temporal, ctxt_input, ctxt_mask_temporal, vtxt_input; UNet sample,
  // encoder_hidden_states[, text_embeds, time_ids]). The batch is used as loaded (float32): the model
  // casts to its compute dtype (the parameters' dtype) where the reference does under autocast
  // (docs/models.md 5); the loss is a float32 scalar; noise and timesteps are drawn from `generator`.
  TrainingLoss training_loss;
  // The objective a run's [loss] table asks for (models/loss_config.h), made once before training; the
  // default LossConfig gives training_loss. `pretrained` is [model] pretrained ("" = none): a pipeline
  // folder's scheduler config gives a UNet its noise schedule and prediction type. An option the family's
  // objective does not have is an error naming the key.
  std::function<TrainingObjective(const LossConfig& loss, const std::string& pretrained)> make_training_loss;
  // The dataset features of a model-configuration table (read with the family's own parser, so the
  // defaults and validation are the model's); `source` names the configuration in messages.
  std::function<DatasetFeatures(ConfigTable& config, const std::string& source)> dataset_features;
  // Adds to a loader batch, ahead of its step, what the step would otherwise work out on the host from it
  // (HY-Motion's packed-token indices): a step that reads nothing on the host never waits for the device and
  // can be captured as a CUDA graph. `zest train` calls it on the page-locked host batch, `zest bench` on
  // its synthetic batches; training_loss must also take a batch without the additions.
  std::function<void(TensorMap& batch)> prepare_batch;
  // A random batch of the loader's keys and the model's real shapes on `device` (benchmarks).
  std::function<TensorMap(UnitModule& model, const SyntheticShapes& shapes, int64_t batch_size,
                          const torch::Device& device, torch::Generator& generator)>
      synthetic_batch;
  // Activations a training step keeps per sample, unit by unit, for the data's shapes (pre-flight check,
  // `zest estimate`): computed from the configuration, without building the model.
  std::function<ActivationProfile(ConfigTable& config, const ActivationShapes& shapes)> activation_profile;
  // The pretrained folders the family reads and its exports write (none: plain safetensors files only);
  // folders are recognised in registration order, family by family.
  std::vector<FolderFormat> folder_formats;
  // The layers [lora] adapts when its target_modules is empty (models/common/lora.h's matching rule).
  std::vector<std::string> lora_targets;
  // The prefix of the layer names in the family's LoRA files (models/lora_file.h): peft's PeftModel writes
  // "base_model.model.", diffusers' pipelines "unet.".
  std::string lora_name_prefix = "base_model.model.";
};

// Every registered family in registration order (the built-ins first), and lookup by name (error lists the
// known names). Entries never move: a `const ModelFamily*` stays valid for the process's life.
const std::deque<ModelFamily>& model_families();
const ModelFamily& model_family(const std::string& name);
bool is_model_family(const std::string& name);
std::string model_family_names();  // "hymotion, unet[, ...]": how messages list them

// Adds a family after the built-ins (models/registry.cpp make_families lists those), with the same checks:
// the required members set, the name new and well formed, its folder formats complete and not already taken;
// otherwise one error naming the family and what is wrong. Not synchronised: register before anything looks
// families up from another thread (at the start of main, or of a test), as the built-ins are.
const ModelFamily& register_model_family(ModelFamily family);

// The family that owns folder format `name` and that format; both null when no family has one so named.
struct OwnedFolderFormat {
  const ModelFamily* family = nullptr;
  const FolderFormat* format = nullptr;
};
OwnedFolderFormat find_folder_format(const std::string& name);
// Every family's folder formats, ordered by name (how messages list them).
std::vector<OwnedFolderFormat> folder_formats_by_name();

// Built-in model configurations (the files configs/models/*.toml, embedded into the binary).
struct BuiltinModelConfig {
  std::string name;       // flavor, e.g. "hymotion_1b", "unet_sd15", "unet_tiny"
  std::string family;     // "hymotion" or "unet"
  std::string toml_text;  // the configuration file's text
};
const std::vector<BuiltinModelConfig>& builtin_model_configs();
const BuiltinModelConfig& builtin_model_config(const std::string& name);

}  // namespace zest
