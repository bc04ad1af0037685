// Validation samples during training, as diffusers' training scripts' --validation_prompt: every
// `[sample] every_steps` optimizer steps the UNet being trained (its EMA when the run keeps one) draws the
// configured prompts with the run's pipeline folder, into PNG grids under RUN_DIR/samples/, each listed in
// metrics.jsonl; a HY-Motion run draws motions of the prompts (.npy + skeleton GIFs) with its release folder
// and HY-Motion's text encoders. The [sample] table's keys, checked with the run file.
#pragma once

#include "models/loss_config.h"
#include "train/progress.h"

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace zest {

class ConfigTable;
class ConfigWriter;
class Communicator;
class Engine;
struct LoraRecord;
struct ModelSelection;
struct SdPipeline;

struct SampleConfig {
  int64_t every_steps = 0;           // 0: no validation samples
  std::vector<std::string> prompts;  // one grid per prompt
  std::string negative_prompt;       // "" (SD1.5's unconditional input; SDXL: zeros, as its pipeline)
  std::string pretrained;            // pipeline folder; "" = [model] pretrained's (the folder, or above its unet/)
  int64_t steps = 30;
  double guidance = 7.5;
  int64_t seed = 0;
  std::string size = "512x512";      // WIDTHxHEIGHT
  int64_t num_images = 4;            // per prompt, one grid
  std::string scheduler;             // ddim | euler | dpmpp; "" = the pipeline's own
  // HY-Motion runs (motions from the prompts, models/hy_text): where Qwen3-8B/ and clip-vit-large-patch14/ are
  // ("" = the release's ckpts/ layout) and the motion length. steps and guidance, when the run file leaves
  // them out, are the release's (50 Euler steps, its text_guidance_scale).
  std::string text_encoders;
  int64_t frames = 180;
  bool steps_given = false, guidance_given = false;

  static SampleConfig from_toml(ConfigTable& table);
};

void to_toml(const SampleConfig& config, ConfigWriter& out);
template <typename C>
class FieldTable;
const FieldTable<SampleConfig>& sample_fields();  // the [sample] table (core/field_table.h)

// The pipeline folder validation samples use: `sample.pretrained`, else the model's pretrained folder
// (a pipeline folder, or the pipeline above a unet/ folder). "" when neither names one.
std::string sample_pipeline_folder(const SampleConfig& config, const ModelSelection& model);

// What one validation round wrote (rank 0; empty elsewhere): every file, and each prompt's pictures in prompt
// order (an SD grid, or one HY-Motion skeleton GIF per sample; none where the motion has no skeleton).
struct ValidationFiles {
  std::vector<std::string> files;
  std::vector<std::vector<std::string>> pictures_by_prompt;
};

class ValidationSamples {
 public:
  // Checked at the start of the run (every rank): the family must be the UNet's and a pipeline folder known.
  // `loss`: the run's [loss]; where it sets the prediction type or zero terminal SNR, the samples follow it
  // rather than the pipeline's scheduler config (the model being trained predicts what [loss] says).
  ValidationSamples(SampleConfig config, const ModelSelection& model, const std::string& family, std::string run_dir,
                    LossConfig loss = {});
  ~ValidationSamples();

  // A LoRA run: the samples are drawn by the pipeline's own UNet (the base) with the run's adapters on it.
  void use_lora(const LoraRecord& record);

  bool due(int64_t step) const { return config_.every_steps > 0 && step % config_.every_steps == 0; }
  // Collective on due steps (the ranks gather the weights); rank 0 draws and writes.
  ValidationFiles run(Engine& engine, Communicator& comm, int64_t step, ProgressReporter& progress);

 private:
  SampleConfig config_;
  LossConfig loss_;
  std::string pipeline_folder_;
  std::string run_dir_;
  std::unique_ptr<SdPipeline> pipeline_;  // rank 0, loaded on first use
  bool motion_ = false;                    // a HY-Motion run: motions instead of pictures
  std::vector<std::string> text_folders_;  // HY-Motion: the Qwen3 and CLIP folders
  std::vector<torch::Tensor> prompt_features_;  // HY-Motion, rank 0: ctxt, ctxt_length, vtxt of every prompt

  ValidationFiles run_motion(const std::string& weights, const torch::Device& device, int64_t step,
                             nlohmann::json& listed);
  std::map<std::string, std::string> lora_metadata_;  // a LoRA run's file metadata (models/lora_file.h); empty: none
};

}  // namespace zest
