// One sample's cached features, for sampling from a trained model: where a sample lives (a shard file, or
// a dataset folder with a global index) and its tensors read by key, shape-checked against the model.
#pragma once

#include "formats/safetensors.h"

#include <torch/torch.h>

#include <cstdint>
#include <string>

namespace zest {

// Where a sample's cached features are: `path` names a shard (the index is within it) or a dataset folder
// (the index is global, shards in dataset.json order; the folder's statistics file comes along).
struct SampleLocation {
  std::string shard;
  int64_t index = 0;
  std::string stats;  // motion datasets: per-feature mean/std file, else ""
};

// Errors name the dataset and its size when `index` is out of range.
SampleLocation locate_sample(const std::string& path, int64_t index);

// Tensor `key` of sample `index`: a file of one sample stores it with `sample_dims` dimensions, a dataset
// shard stacks its samples along a new leading dimension. A missing key lists the file's tensors.
torch::Tensor read_sample(const safetensors::Reader& file, const std::string& key, int64_t index, int64_t sample_dims);

// `t` reshaped to `shape`, or an error naming the tensor (`what`) when the element counts differ.
torch::Tensor reshape_checked(const torch::Tensor& t, torch::IntArrayRef shape, const std::string& what);

}  // namespace zest
