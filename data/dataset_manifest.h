// DatasetManifest: a dataset folder's dataset.json (format, shard list with sample counts, feature
// widths, normalisation statistics file), read with validation and written atomically.
// The formats are specified in docs/data_formats.md.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace zest {

enum class DatasetFormat { motion, latents };

const char* format_name(DatasetFormat format);  // "zest.motion.v1", "zest.latents.v1"

struct ShardEntry {
  std::string file;     // relative to the dataset folder, in its normal spelling (inside the folder)
  int64_t samples = 0;  // sample count the shard must hold
  // latents with aspect-ratio buckets: this shard's latent size (every sample of a shard has one size);
  // 0 = features.height / features.width.
  int64_t height = 0;
  int64_t width = 0;
};

struct DatasetManifest {
  DatasetFormat format = DatasetFormat::motion;
  std::vector<ShardEntry> shards;
  // Widths by name. motion: motion_dim, text_tokens, text_dim, pooled_dim.
  // latents: channels, height, width, text_tokens, text_dim, pooled_dim (0 = none), time_ids (0 or 1).
  std::map<std::string, int64_t> features;
  std::string stats_file;  // motion: per-feature mean/std (relative to the folder); latents: ""
  std::string empty_prompt_file;  // latents: the empty caption's text embedding (caption dropout); "" = none
  std::string source;      // free text: who wrote the dataset (e.g. "zest data synth --model ...")

  int64_t total_samples() const;
  // DIR/<file> of a shard / of the statistics, confined to DIR (core/untrusted_file.h): a name that leaves
  // the folder, or a file that is not a regular one, is an error naming dataset.json and the entry.
  std::string shard_path(const std::string& dir, size_t shard) const;
  std::string stats_path(const std::string& dir, bool must_exist = true) const;
  std::string empty_prompt_path(const std::string& dir) const;
  // A width; error naming dataset.json when absent.
  int64_t feature(const std::string& name) const;
};

// `dir`/dataset.json, parsed and validated (known format, every required width present, positive and
// bounded, shard files named once after normalisation and inside `dir`, counts > 0). Errors name the
// file and the offending field.
DatasetManifest read_manifest(const std::string& dir);
// Writes `dir`/dataset.json (through a temporary file and a rename).
void write_manifest(const std::string& dir, const DatasetManifest& manifest);

}  // namespace zest
