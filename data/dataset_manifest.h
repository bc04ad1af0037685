// DatasetManifest: a dataset folder's dataset.json (format, shard list with sample counts, feature
// widths, normalisation statistics file), read with validation and written atomically.
// The formats are specified in docs/data_formats.md; what tells them apart is one table (DatasetFormatSpec).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace zest {

enum class DatasetFormat { motion, latents };

class Dataset;          // data/dataset.h
struct DatasetManifest;  // below
struct DatasetOptions;  // data/dataset.h

// Everything a dataset format does differently, one row each (data/dataset_formats.cpp): its names, the
// widths dataset.json must give, the unit of its throughput, its dataset class and how its sizes read. What
// a sample and a batch hold is the dataset class's (data/motion_dataset.h, data/latent_dataset.h);
// `zest data synth`'s generator of each format is data/synth.cpp's.
struct DatasetFormatSpec {
  DatasetFormat format;
  std::string kind;                             // ModelFamily::dataset_features' name: "motion", "latents"
  std::string file_name;                        // dataset.json's "format": "zest.motion.v1"
  std::vector<std::string> required_features;   // widths dataset.json must give
  std::vector<std::string> may_be_zero;         // of those, the ones of an optional tensor (0 = absent)
  std::string items_name;                       // what throughput counts: "frames", "latent px"
  // The format's dataset class on a validated listing (open_dataset in data/dataset.h calls it).
  std::shared_ptr<const Dataset> (*open)(std::string dir, DatasetManifest manifest, const DatasetOptions& options);
  // A sample's size in words, "360 frames" or "64x64 latents" (0 = the family's default: "default").
  std::string (*describe_size)(int64_t length, int64_t width);
};
const std::vector<DatasetFormatSpec>& dataset_format_specs();
const DatasetFormatSpec& dataset_format_spec(DatasetFormat format);
// The format a model family trains on, by its kind; an unknown kind is an error naming `model` and the kinds.
DatasetFormat dataset_format_of_kind(const std::string& kind, const std::string& model);

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
