// Validation samples during training, as diffusers' training scripts' --validation_prompt: every
// `[sample] every_steps` optimizer steps the UNet being trained (its EMA when the run keeps one) draws the
// configured prompts with the run's pipeline folder, into PNG grids under RUN_DIR/samples/, each listed in
// metrics.jsonl. The [sample] table's keys, checked with the run file.
#pragma once

#include "tools/progress.h"

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

  static SampleConfig from_toml(ConfigTable& table);
};

void to_toml(const SampleConfig& config, ConfigWriter& out);

// The pipeline folder validation samples use: `sample.pretrained`, else the model's pretrained folder
// (a pipeline folder, or the pipeline above a unet/ folder). "" when neither names one.
std::string sample_pipeline_folder(const SampleConfig& config, const ModelSelection& model);

class ValidationSamples {
 public:
  // Checked at the start of the run (every rank): the family must be the UNet's and a pipeline folder known.
  ValidationSamples(SampleConfig config, const ModelSelection& model, const std::string& family, std::string run_dir);
  ~ValidationSamples();

  // A LoRA run: the samples are drawn by the pipeline's own UNet (the base) with the run's adapters on it.
  void use_lora(const LoraRecord& record);

  bool due(int64_t step) const { return config_.every_steps > 0 && step % config_.every_steps == 0; }
  // Collective on due steps (the ranks gather the weights); rank 0 draws and writes. Returns the files.
  std::vector<std::string> run(Engine& engine, Communicator& comm, int64_t step, ProgressReporter& progress);

 private:
  SampleConfig config_;
  std::string pipeline_folder_;
  std::string run_dir_;
  std::unique_ptr<SdPipeline> pipeline_;  // rank 0, loaded on first use
  std::map<std::string, std::string> lora_metadata_;  // a LoRA run's file metadata (models/lora_file.h); empty: none
};

}  // namespace zest
