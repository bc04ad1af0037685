// Synthetic datasets with learnable structure (`zest data synth`): the conditioning (text features) is
// generated from a small random code per sample and the target (motion or latents) is a smooth pattern
// whose frequency, amplitudes and phases are functions of that code, so a conditional model can learn
// to lower its loss well below the unconditional level.
#pragma once

#include "data/dataset_manifest.h"
#include "data/model_features.h"

#include <cstdint>
#include <map>
#include <string>

namespace zest {

struct SynthOptions {
  int64_t samples = 256;
  uint64_t seed = 0;                 // the whole dataset is a function of (model widths, options)
  int64_t samples_per_shard = 0;     // 0 = as many as fit in about 128 MB
  bool overwrite = false;            // replace an existing dataset in the folder
  std::map<std::string, int64_t> widths;  // overrides of the model's open widths: text_tokens, height,
                                          // width, min_frames, max_frames
  std::string source;                // recorded in dataset.json ("" = a description of these options)
};

// Writes shards, stats.safetensors (motion) and, last, dataset.json into `dir` (created if needed).
// Text features are stored as bf16 for text_dim >= 1024 (the released encoders' widths), else float32.
DatasetManifest synthesize_dataset(const std::string& dir, const ExpectedFeatures& model, const SynthOptions& options);

}  // namespace zest
