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

// HY-Motion: motion_dim = input_dim, text_dim = ctxt_input_dim, pooled_dim = vtxt_input_dim.
// UNet: channels = in_channels, text_dim = cross_attention_dim, and for SDXL-style "text_time" models
// pooled_dim = projection_class_embeddings_input_dim − 6·addition_time_embed_dim and time_ids = 1
// (else 0 and 0). Height and width are open (the UNet is size-agnostic); defaults: sample_size.
ExpectedFeatures model_features(const ResolvedModel& model);
// The same for a built-in configuration by flavor name ("hymotion_tiny", "unet_sdxl", ...).
ExpectedFeatures builtin_model_features(const std::string& flavor);

// Checks a dataset against a model: same format and every expected width equal. The error names
// DIR/dataset.json, the width, both values and the model.
void check_features(const std::string& dir, const DatasetManifest& manifest, const ExpectedFeatures& expected);

}  // namespace zest
