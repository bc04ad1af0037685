// The value scan of `zest data check`: every floating tensor of every shard read in bounded pieces, and
// each one that holds NaN or Inf reported with the first sample it belongs to (training on it would
// turn the loss into NaN at some step far from the cause).
#pragma once

#include "data/dataset_manifest.h"

#include <cstdint>
#include <string>
#include <vector>

namespace zest {

struct NonFiniteTensor {
  std::string file;     // the shard, DIR/NAME
  std::string tensor;   // its name in the shard
  int64_t count = 0;    // NaN and Inf values in it
  int64_t sample = 0;   // the first sample holding one, counted in the shard
  int64_t dataset_sample = 0;  // the same sample's index in the whole dataset
};

// Every tensor of `manifest`'s shards (in `dir`) that holds a non-finite value, in shard order.
std::vector<NonFiniteTensor> find_non_finite(const std::string& dir, const DatasetManifest& manifest);

// One line for the error of `zest data check`, naming the first few tensors and samples.
std::string describe_non_finite(const std::string& dir, const std::vector<NonFiniteTensor>& found);

}  // namespace zest
