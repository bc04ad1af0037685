// Validation rounds: the weights gathered, the family's pipeline drawing, the round listed (see
// validation_samples.h).
#include "train/validation_samples.h"

#include "checkpoint/merge.h"
#include "comm/communicator.h"
#include "core/check.h"
#include "engine/engine.h"
#include "models/lora_file.h"

#include <nlohmann/json.hpp>

#include <filesystem>

namespace zest {

namespace fs = std::filesystem;

ValidationSamples::ValidationSamples(SampleConfig config, const ModelSelection& model, const std::string& family,
                                     std::string run_dir, LossConfig loss)
    : config_(std::move(config)), family_(family), run_dir_(std::move(run_dir)) {
  if (config_.every_steps == 0) return;
  const FamilyPipeline* pipeline = find_family_pipeline(family_);
  ZEST_CHECK(pipeline != nullptr, "[sample] draws with a family's pipeline (", family_pipeline_names(), "); this run "
             "trains a ", family_, " model (remove [sample] or set sample.every_steps = 0)");
  drawer_ = pipeline->validation(config_, model, loss);
}

ValidationSamples::~ValidationSamples() = default;

void ValidationSamples::use_lora(const LoraRecord& record) { lora_metadata_ = lora_file_metadata(family_, record); }

ValidationFiles ValidationSamples::run(Engine& engine, Communicator& comm, int64_t step, ProgressReporter& progress) {
  const fs::path folder = fs::path(run_dir_) / "samples";
  const ValidationWeights weights{(folder / ".weights_for_samples.safetensors").string(), !lora_metadata_.empty()};
  checkpoint::MergeOptions merge;
  merge.ema = engine.ema() != nullptr;  // what people ship, as diffusers' scripts sample the EMA
  if (weights.lora) {  // the adapters, as the family's LoRA file
    merge.name_prefix = lora_name_prefix(family_);
    merge.extra_metadata = lora_metadata_;
  }
  if (comm.rank() == 0) fs::create_directories(folder);
  comm.barrier();
  checkpoint::merge_online(engine, weights.file, merge);  // every rank gathers; rank 0 writes
  if (comm.rank() != 0) return {};
  nlohmann::json listed = nlohmann::json::array();
  ValidationFiles written;
  try {
    written = drawer_->draw(weights, engine.device(), step, folder, listed);
  } catch (...) {
    fs::remove(weights.file);
    throw;
  }
  fs::remove(weights.file);
  const nlohmann::json record = {{"step", step}, {"validation_samples", listed}, {"ema", merge.ema}};
  progress.record_line(record.dump());
  const size_t count = written.files.size();
  progress.message("validation samples of step " + std::to_string(step) + ": " + std::to_string(count) + " " +
                   drawer_->file_noun() + (count == 1 ? "" : "s") + " in " + folder.string());
  return written;
}

}  // namespace zest
