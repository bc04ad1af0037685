// Sampling, family by family: each model family that draws samples has one FamilyPipeline — which
// `zest sample --pretrained` folders are its own, `zest sample`'s run on them, and what draws [sample]'s
// validation samples while the family trains. The built-ins are HY-Motion's (pipelines/motion_samples.cpp)
// and Stable Diffusion's UNet's (pipelines/sd_samples.cpp); another family adds its own with
// register_family_pipeline (docs/design.md "How to add a model family").
#pragma once

#include "models/loss_config.h"
#include "pipelines/sample_config.h"

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <deque>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace zest {

struct ModelSelection;
struct SampleOptions;

// What one validation round wrote (rank 0; empty elsewhere): every file, and each prompt's pictures in prompt
// order (an SD grid, or one HY-Motion skeleton GIF per sample; none where the motion has no skeleton).
struct ValidationFiles {
  std::vector<std::string> files;
  std::vector<std::vector<std::string>> pictures_by_prompt;
};

// The network one validation round draws with: the merged model (every parameter, the family's state-dict
// names), or, in a LoRA run, the run's adapters as a LoRA file (models/lora_file.h) on the pipeline's own
// network.
struct ValidationWeights {
  std::string file;
  bool lora = false;
};

// Draws the validation rounds of one run (rank 0), keeping what it may between rounds (the pipeline, the
// prompts' text features).
class ValidationDrawer {
 public:
  virtual ~ValidationDrawer() = default;
  // Every [sample] prompt with `weights`, into `folder` (file names carry `step`); each prompt's entry is
  // appended to `listed` ({"prompt", "file", ...}, paths relative to the run folder).
  virtual ValidationFiles draw(const ValidationWeights& weights, const torch::Device& device, int64_t step,
                               const std::filesystem::path& folder, nlohmann::json& listed) = 0;
  // What the log counts the written files as: "grid", "motion file".
  virtual std::string file_noun() const = 0;
};

struct FamilyPipeline {
  std::string family;  // its ModelFamily::name (models/registry.h)
  // Whether `zest sample --pretrained FOLDER` names this family's pipeline; families are asked in registration
  // order. Empty: the folder no other family claims (one family at most; Stable Diffusion's, whose loader
  // names what a folder lacks).
  std::function<bool(const std::filesystem::path& folder)> owns_folder;
  // `zest sample` on this family's folder: every option checked before anything loads, the output written,
  // one summary line printed.
  std::function<void(const SampleOptions& args)> sample;
  // [sample] of a run training this family, made on every rank at the start of the run (so that a missing
  // folder is an error before the first step); only rank 0 draws. `loss` is the run's [loss]: a network
  // predicts what its objective trained it to.
  std::function<std::unique_ptr<ValidationDrawer>(const SampleConfig& config, const ModelSelection& model,
                                                  const LossConfig& loss)>
      validation;
};

// Every family's pipeline in registration order (the built-ins first); entries never move.
const std::deque<FamilyPipeline>& family_pipelines();
// The pipeline of model family `family`; null when the family draws no samples.
const FamilyPipeline* find_family_pipeline(const std::string& family);
// The pipeline `zest sample --pretrained FOLDER` runs (see FamilyPipeline::owns_folder).
const FamilyPipeline& family_pipeline_for_folder(const std::filesystem::path& folder);
// "hymotion, unet[, ...]": the families that draw samples, as messages list them.
std::string family_pipeline_names();

// Adds a family's pipeline after the built-ins: its family registered (models/registry.h) and without one,
// sample and validation set, owns_folder set unless no pipeline yet leaves it empty; otherwise one error naming
// the family and what is wrong. Not synchronised: register where families are registered.
const FamilyPipeline& register_family_pipeline(FamilyPipeline pipeline);

}  // namespace zest
