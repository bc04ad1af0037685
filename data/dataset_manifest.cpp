// dataset.json: parsing with validation (every error names the file and the field) and atomic writing.
#include "data/dataset_manifest.h"

#include "core/check.h"
#include "core/untrusted_file.h"
#include "formats/json_text.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

namespace zest {
namespace {

using Json = nlohmann::json;
namespace fs = std::filesystem;

const std::vector<std::string>& required_features(DatasetFormat format) {
  static const std::vector<std::string> motion = {"motion_dim", "text_tokens", "text_dim", "pooled_dim"};
  static const std::vector<std::string> latents = {"channels", "height", "width", "text_tokens", "text_dim",
                                                   "pooled_dim", "time_ids"};
  return format == DatasetFormat::motion ? motion : latents;
}

// Widths that may be 0 (an absent optional tensor).
bool may_be_zero(const std::string& name) { return name == "pooled_dim" || name == "time_ids"; }

DatasetFormat parse_format(const std::string& path, const Json& doc) {
  ZEST_CHECK(doc.contains("format") && doc["format"].is_string(), path,
             ": needs \"format\": \"zest.motion.v1\" or \"zest.latents.v1\"");
  const std::string name = doc["format"].get<std::string>();
  for (DatasetFormat f : {DatasetFormat::motion, DatasetFormat::latents})
    if (name == format_name(f)) return f;
  ZEST_FAIL(path, ": unknown format \"", name, "\" (this zest reads zest.motion.v1 and zest.latents.v1)");
}

// Largest accepted width and shard size: far above any real dataset, small enough that sizes computed
// from them (a sample's bytes, a shard's tensor shapes) cannot overflow.
constexpr int64_t kMaxFeatureWidth = int64_t{1} << 24;
constexpr int64_t kMaxShardSamples = int64_t{1} << 32;

std::map<std::string, int64_t> parse_features(const std::string& path, const Json& doc, DatasetFormat format) {
  ZEST_CHECK(doc.contains("features") && doc["features"].is_object(), path,
             ": needs a \"features\" object with the widths");
  std::map<std::string, int64_t> features;
  for (const auto& [name, value] : doc["features"].items()) {
    ZEST_CHECK(value.is_number_integer(), path, ": features.", printable(name), " must be an integer, got ",
               printable(value.dump(), 80));
    features[name] = value.get<int64_t>();
    ZEST_CHECK(features[name] <= kMaxFeatureWidth, path, ": features.", printable(name), " = ", features[name],
               " is too large (at most ", kMaxFeatureWidth, ")");
  }
  for (const std::string& name : required_features(format)) {
    const auto it = features.find(name);
    ZEST_CHECK(it != features.end(), path, ": features.", name, " is missing (", format_name(format),
               " needs it)");
    ZEST_CHECK(it->second > 0 || (may_be_zero(name) && it->second == 0), path, ": features.", name, " = ",
               it->second, " must be ", may_be_zero(name) ? ">= 0" : "> 0");
  }
  return features;
}

// Shard names are checked against the folder here (no absolute path, no "..", no link leading out, no
// FIFO or device) and kept in their normal spelling, so "./shard-0" and "shard-0" are one file.
std::vector<ShardEntry> parse_shards(const std::string& dir, const std::string& path, const Json& doc) {
  ZEST_CHECK(doc.contains("shards") && doc["shards"].is_array() && !doc["shards"].empty(), path,
             ": needs a non-empty \"shards\" list of {\"file\": ..., \"samples\": ...}");
  std::vector<ShardEntry> shards;
  std::map<std::string, size_t> seen;  // normal name → index of its first entry
  for (size_t i = 0; i < doc["shards"].size(); ++i) {
    const Json& entry = doc["shards"][i];
    ZEST_CHECK(entry.is_object() && entry.contains("file") && entry["file"].is_string() &&
                   entry.contains("samples") && entry["samples"].is_number_integer(),
               path, ": shards[", i, "] must be {\"file\": STRING, \"samples\": INTEGER}, got ",
               printable(entry.dump(), 120));
    const std::string given = entry["file"].get<std::string>();
    confined_path(dir, given, {path, str("shards[", i, "].file")}, /*must_exist=*/false);
    ShardEntry shard{normal_name(given), entry["samples"].get<int64_t>()};
    ZEST_CHECK(shard.samples > 0 && shard.samples <= kMaxShardSamples, path, ": shards[", i, "] (",
               printable(shard.file), ") has ", shard.samples, " samples; must be in [1, ", kMaxShardSamples, "]");
    ZEST_CHECK(entry.contains("height") == entry.contains("width"), path, ": shards[", i,
               "] gives only one of \"height\" and \"width\" (a bucket's latent size needs both)");
    for (const char* side : {"height", "width"}) {
      if (!entry.contains(side)) continue;
      ZEST_CHECK(entry[side].is_number_integer() && entry[side].get<int64_t>() > 0 &&
                     entry[side].get<int64_t>() <= kMaxFeatureWidth,
                 path, ": shards[", i, "].", side, " must be an integer in [1, ", kMaxFeatureWidth, "], got ",
                 printable(entry[side].dump(), 40));
      (std::string(side) == "height" ? shard.height : shard.width) = entry[side].get<int64_t>();
    }
    const auto [first, inserted] = seen.emplace(shard.file, i);
    ZEST_CHECK(inserted, path, ": shards[", i, "] (\"", printable(given), "\") and shards[", first->second,
               "] name the same file ", printable(shard.file), "; list each shard once");
    shards.push_back(std::move(shard));
  }
  return shards;
}

}  // namespace

const char* format_name(DatasetFormat format) {
  return format == DatasetFormat::motion ? "zest.motion.v1" : "zest.latents.v1";
}

int64_t DatasetManifest::total_samples() const {
  int64_t total = 0;
  for (const ShardEntry& shard : shards) total += shard.samples;
  return total;
}

int64_t DatasetManifest::feature(const std::string& name) const {
  const auto it = features.find(name);
  ZEST_CHECK(it != features.end(), "dataset.json: features.", name, " is missing");
  return it->second;
}

std::string DatasetManifest::shard_path(const std::string& dir, size_t shard) const {
  return confined_path(dir, shards.at(shard).file,
                       {(fs::path(dir) / "dataset.json").string(), str("shards[", shard, "].file")});
}

std::string DatasetManifest::stats_path(const std::string& dir, bool must_exist) const {
  ZEST_CHECK(!stats_file.empty(), dir, "/dataset.json: no \"stats\" file is named");
  return confined_path(dir, stats_file, {(fs::path(dir) / "dataset.json").string(), "stats"}, must_exist);
}

std::string DatasetManifest::empty_prompt_path(const std::string& dir) const {
  ZEST_CHECK(!empty_prompt_file.empty(), dir, "/dataset.json: no \"empty_prompt\" file is named");
  return confined_path(dir, empty_prompt_file, {(fs::path(dir) / "dataset.json").string(), "empty_prompt"});
}

DatasetManifest read_manifest(const std::string& dir) {
  const std::string path = (fs::path(dir) / "dataset.json").string();
  ZEST_CHECK(fs::exists(path) || fs::is_symlink(path), path,
             ": cannot open (is this a dataset folder? it needs dataset.json; `zest data synth` writes one)");
  const Json doc = parse_json(read_text_file(path, "dataset listing (dataset.json)", 256ull << 20), path);
  ZEST_CHECK(doc.is_object(), path, ": must hold a JSON object");
  DatasetManifest m;
  m.format = parse_format(path, doc);
  m.features = parse_features(path, doc, m.format);
  m.shards = parse_shards(dir, path, doc);
  if (doc.contains("stats")) {
    ZEST_CHECK(doc["stats"].is_string(), path, ": \"stats\" must be a file name");
    const std::string given = doc["stats"].get<std::string>();
    confined_path(dir, given, {path, "stats"}, /*must_exist=*/false);
    m.stats_file = normal_name(given);
    for (const ShardEntry& shard : m.shards)
      ZEST_CHECK(shard.file != m.stats_file, path, ": \"stats\" names the shard ", printable(shard.file),
                 "; the statistics need a file of their own");
  }
  if (doc.contains("empty_prompt")) {
    ZEST_CHECK(doc["empty_prompt"].is_string(), path, ": \"empty_prompt\" must be a file name");
    const std::string given = doc["empty_prompt"].get<std::string>();
    confined_path(dir, given, {path, "empty_prompt"}, /*must_exist=*/false);
    m.empty_prompt_file = normal_name(given);
  }
  if (doc.contains("source") && doc["source"].is_string()) m.source = doc["source"].get<std::string>();
  return m;
}

void write_manifest(const std::string& dir, const DatasetManifest& m) {
  Json doc;
  doc["format"] = format_name(m.format);
  doc["features"] = Json::object();
  for (const auto& [name, value] : m.features) doc["features"][name] = value;
  if (!m.stats_file.empty()) doc["stats"] = m.stats_file;
  doc["shards"] = Json::array();
  if (!m.empty_prompt_file.empty()) doc["empty_prompt"] = m.empty_prompt_file;
  for (const ShardEntry& shard : m.shards) {
    Json entry = {{"file", shard.file}, {"samples", shard.samples}};
    if (shard.height > 0) entry["height"] = shard.height;
    if (shard.width > 0) entry["width"] = shard.width;
    doc["shards"].push_back(entry);
  }
  if (!m.source.empty()) doc["source"] = m.source;
  const fs::path path = fs::path(dir) / "dataset.json";
  const fs::path tmp = fs::path(dir) / "dataset.json.tmp";
  fs::remove(tmp);  // a leftover or a planted link: removed, never written through
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    ZEST_CHECK(out.good(), tmp.string(), ": cannot write");
    out << doc.dump(2) << "\n";
    out.close();
    ZEST_CHECK(out.good(), tmp.string(), ": write failed");
  }
  fs::rename(tmp, path);
}

}  // namespace zest
