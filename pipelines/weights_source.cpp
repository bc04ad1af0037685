// Loading a sampled network's values from a file or a checkpoint (see weights_source.h).
#include "pipelines/weights_source.h"

#include "checkpoint/merge.h"
#include "core/check.h"
#include "formats/safetensors.h"
#include "models/state_dict.h"

#include <unistd.h>

#include <filesystem>

namespace zest {
namespace {

void load_file(torch::nn::Module& model, const std::string& weights_file) {
  const safetensors::Reader reader(weights_file);
  LoadOptions strict;
  strict.strict = true;
  load_state_dict(model, reader, strict);
}

}  // namespace

void load_weights(torch::nn::Module& model, const WeightsSource& source) {
  ZEST_CHECK(source.weights_file.empty() || source.checkpoint.empty(), "give --weights or --checkpoint, not both");
  ZEST_CHECK(!source.ema || !source.checkpoint.empty(), "--ema needs --checkpoint");
  ZEST_CHECK(!source.is_pipeline_folder(), "load_weights: no file or checkpoint given");
  if (source.checkpoint.empty()) return load_file(model, source.weights_file);
  namespace fs = std::filesystem;
  const fs::path tmp = fs::temp_directory_path() / ("zest_sample_weights_" + std::to_string(::getpid()) + ".safetensors");
  checkpoint::MergeOptions merge;
  merge.ema = source.ema;
  checkpoint::merge_offline(source.checkpoint, tmp.string(), merge);
  try {
    load_file(model, tmp.string());
  } catch (...) {
    fs::remove(tmp);
    throw;
  }
  fs::remove(tmp);
}

}  // namespace zest
