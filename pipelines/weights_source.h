// Where a sampled network's values come from: its pipeline folder's own weights (default), a safetensors
// file with the network's state-dict names (`zest merge`, checkpoint.merge_at_end), or a zest checkpoint
// (its EMA with `ema`) — shared by every family `zest sample` draws from.
#pragma once

#include <torch/torch.h>

#include <string>

namespace zest {

struct WeightsSource {
  std::string weights_file;
  std::string checkpoint;
  bool ema = false;

  bool is_pipeline_folder() const { return weights_file.empty() && checkpoint.empty(); }
};

// Loads `source`'s values into `model`, strictly by state-dict name (every name present with its shape,
// nothing else in the file): the file itself, or the checkpoint merged into a temporary file first (the
// checkpoint's own checks and checksums), which is removed afterwards. Not for is_pipeline_folder().
void load_weights(torch::nn::Module& model, const WeightsSource& source);

}  // namespace zest
