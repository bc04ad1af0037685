// Per-feature normalisation statistics of a motion dataset (mean and std over every frame of every
// clip), stored as DIR/stats.safetensors: computed from the shards, written, and read with validation.
#pragma once

#include "data/dataset_manifest.h"

#include <torch/torch.h>

#include <cstdint>
#include <string>

namespace zest {

struct MotionStats {
  torch::Tensor mean;  // [motion_dim] float32
  torch::Tensor std;   // [motion_dim] float32, > 0
  int64_t frames = 0;  // frames they were computed from
};

// A feature whose std is below this (e.g. constant) is scaled by the floor instead, so normalising
// never divides by ~0.
constexpr double kMotionStdFloor = 1e-4;

// Mean and (population) std of every feature over all frames of all shards listed in the manifest,
// accumulated in float64, reading the shards in chunks.
MotionStats compute_motion_stats(const std::string& dir, const DatasetManifest& manifest);

// Writes `mean`, `std` (float32) with metadata frames=...; atomically (temporary name + rename).
void write_motion_stats(const std::string& path, const MotionStats& stats);

// Reads and validates: both tensors present, shape [motion_dim], finite, std > 0. Errors name the file.
MotionStats read_motion_stats(const std::string& path, int64_t motion_dim);

}  // namespace zest
