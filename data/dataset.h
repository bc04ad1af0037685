// Dataset: random access to the samples of a dataset folder (dataset.json + safetensors shards), one
// sample as named tensors under the model's input names. Opened by format; every shard is validated
// on open. Thread-safe: the loader's workers share one instance (reads are positioned, pread-based).
#pragma once

#include "formats/safetensors.h"
#include "data/dataset_manifest.h"

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace zest {

struct ExpectedFeatures;  // data/model_features.h

// One sample or one batch: tensor name → tensor (a batch stacks samples along a new leading dim).
using Sample = std::map<std::string, torch::Tensor>;

struct DatasetOptions {
  int64_t seq_len = 0;  // motion: frames per sample (crop/pad); 0 = the longest clip of the dataset
  // latents: probability that get() returns the empty caption's embedding instead of the sample's (the
  // choice is a function of the sample seed); needs dataset.json's empty_prompt.
  double caption_dropout = 0.0;
};

// The size of one sample as get() returns it (float32 features, bool masks): `fixed` bytes plus
// `per_frame` bytes for each of `frames` frames (sequence data; 0 for fixed-size samples).
struct SampleBytes {
  int64_t fixed = 0;
  int64_t per_frame = 0;
  int64_t frames = 0;
  double total() const { return static_cast<double>(fixed) + static_cast<double>(per_frame) * static_cast<double>(frames); }
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  Dataset(const Dataset&) = delete;
  Dataset& operator=(const Dataset&) = delete;

  int64_t size() const { return total_; }
  const std::string& dir() const { return dir_; }
  const DatasetManifest& manifest() const { return manifest_; }

  // Sample `index` ∈ [0, size()). `seed` drives its random choices (the motion crop window), so a
  // sample is a pure function of (index, seed). Errors name the shard file.
  virtual Sample get(int64_t index, uint64_t seed) const = 0;
  // Computed from the shapes, without reading a sample: memory checks happen before any allocation.
  virtual SampleBytes sample_bytes() const = 0;
  // What throughput counts in a batch of this dataset (DatasetFormatSpec::items_name), read on the host.
  virtual int64_t items_in(const Sample& batch) const = 0;
  // "DIR/FILE (sample k of the shard)", for messages.
  std::string where(int64_t index) const;
  // 16 hex digits that tell this dataset from another of the same size: xxh64 of the listing (format,
  // widths, shard names and counts) and of each shard's header and first and last 64 KiB of data, so it
  // costs a few reads per shard, not a pass over the data. Kept with checkpoints, compared on resume.
  std::string fingerprint() const;
  // Samples that may share a batch have the same group (latents with aspect-ratio buckets: one group per
  // latent size); empty when every sample may go with every other.
  virtual std::vector<int64_t> sample_groups() const { return {}; }

 protected:
  Dataset(std::string dir, DatasetManifest manifest);

  struct Location {
    size_t shard = 0;
    int64_t local = 0;
  };
  Location locate(int64_t index) const;
  const safetensors::Reader& reader(size_t shard) const { return readers_[shard]; }
  size_t num_shards() const { return readers_.size(); }
  std::string shard_path(size_t shard) const;

  // Checks that shard `shard` holds `name` with a dtype in `dtypes` and exactly `shape`; the error names
  // the file, the tensor, and what dataset.json says.
  void expect_tensor(size_t shard, const std::string& name, const std::vector<torch::Dtype>& dtypes,
                     const std::vector<int64_t>& shape) const;

 private:
  std::string dir_;
  DatasetManifest manifest_;
  std::vector<safetensors::Reader> readers_;
  std::vector<int64_t> starts_;  // global index of each shard's first sample
  int64_t total_ = 0;
};

// Opens DIR as the format its dataset.json names. With `expected`, first checks the widths against
// the model (error naming dataset.json and the width).
std::shared_ptr<const Dataset> open_dataset(const std::string& dir, const DatasetOptions& options = {},
                                            const ExpectedFeatures* expected = nullptr);

// Stacks samples into a batch (every sample must have the same keys and shapes); `pinned`: into
// page-locked host memory (needs a CUDA build, for batches bound for a GPU).
Sample collate(const std::vector<Sample>& samples, bool pinned = false);

// The floating dtypes a shard may store features in (read as float32).
const std::vector<torch::Dtype>& float_dtypes();

}  // namespace zest
