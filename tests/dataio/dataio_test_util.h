// Helpers of the data tests: a scratch folder under the build tree and small synthetic datasets.
#pragma once

#include "data/model_features.h"
#include "data/synth.h"

#include <unistd.h>

#include <filesystem>
#include <string>

namespace zest::testing {

// A fresh folder under the build tree, removed on destruction.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& name)
      : path_(std::filesystem::path(ZEST_BINARY_DIR) / "test_scratch" /
              (name + "-" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  std::string path() const { return path_.string(); }
  std::string operator/(const std::string& child) const { return (path_ / child).string(); }

 private:
  std::filesystem::path path_;
};

// A small synthetic dataset for a built-in model in DIR (several shards, so shard boundaries are covered).
inline DatasetManifest synth_small(const std::string& dir, const std::string& flavor, int64_t samples,
                                   int64_t per_shard = 7, uint64_t seed = 0) {
  SynthOptions o;
  o.samples = samples;
  o.samples_per_shard = per_shard;
  o.seed = seed;
  o.overwrite = true;
  return synthesize_dataset(dir, builtin_model_features(flavor), o);
}

}  // namespace zest::testing
