// The data a model trains on: its dataset format and the feature widths its configuration fixes
// (checked against dataset.json), plus defaults for the widths it leaves open (used by `zest data synth`).
#pragma once

#include "data/dataset_manifest.h"

#include <cstdint>
#include <map>
#include <string>

namespace zest {

struct ResolvedModel;  // models/model_resolve.h

struct ExpectedFeatures {
  DatasetFormat format = DatasetFormat::motion;
  std::map<std::string, int64_t> features;  // must equal the dataset's (e.g. motion_dim = input_dim)
  std::map<std::string, int64_t> defaults;  // open widths: text_tokens, height/width, min/max_frames
  std::string model;                        // for messages, e.g. "model hymotion_tiny (hymotion)"
};

// The family's own rule (ModelFamily::dataset_features in models/hymotion/hymotion_family.cpp and
// models/unet/unet_family.cpp) applied to the model's configuration.
ExpectedFeatures model_features(const ResolvedModel& model);
// The same for a built-in configuration by flavor name ("hymotion_tiny", "unet_sdxl", ...).
ExpectedFeatures builtin_model_features(const std::string& flavor);

// Checks a dataset against a model: same format and every expected width equal. The error names
// DIR/dataset.json, the width, both values and the model.
void check_features(const std::string& dir, const DatasetManifest& manifest, const ExpectedFeatures& expected);

}  // namespace zest
