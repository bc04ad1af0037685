// Validation samples during training, as diffusers' training scripts' --validation_prompt: every
// `[sample] every_steps` optimizer steps the network being trained (its EMA when the run keeps one; a LoRA
// run's adapters on the pipeline's own network) is gathered and its family's pipeline draws the configured
// prompts (pipelines/family_pipeline.h: PNG grids for a UNet, motions with skeleton GIFs for HY-Motion) into
// RUN_DIR/samples/, each listed in metrics.jsonl. The [sample] table is pipelines/sample_config.h.
#pragma once

#include "models/loss_config.h"
#include "pipelines/family_pipeline.h"
#include "pipelines/sample_config.h"
#include "train/progress.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>

namespace zest {

class Communicator;
class Engine;
struct LoraRecord;
struct ModelSelection;

class ValidationSamples {
 public:
  // Checked at the start of the run (every rank): the family must draw samples and its folders be there.
  // `loss`: the run's [loss] (a network samples what its objective trained it to predict).
  ValidationSamples(SampleConfig config, const ModelSelection& model, const std::string& family, std::string run_dir,
                    LossConfig loss = {});
  ~ValidationSamples();

  // A LoRA run: the samples are drawn by the pipeline's own network with the run's adapters on it.
  void use_lora(const LoraRecord& record);

  bool due(int64_t step) const { return config_.every_steps > 0 && step % config_.every_steps == 0; }
  // Collective on due steps (the ranks gather the weights); rank 0 draws and writes.
  ValidationFiles run(Engine& engine, Communicator& comm, int64_t step, ProgressReporter& progress);

 private:
  SampleConfig config_;
  std::string family_;
  std::string run_dir_;
  std::unique_ptr<ValidationDrawer> drawer_;           // the family's; null without samples
  std::map<std::string, std::string> lora_metadata_;  // a LoRA run's file metadata (models/lora_file.h); empty: none
};

}  // namespace zest
