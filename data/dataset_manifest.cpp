// dataset.json: parsing with validation (every error names the file and the field) and atomic writing.
#include "data/dataset_manifest.h"

#include "core/check.h"
#include "core/untrusted_file.h"
#include "formats/json_field.h"
#include "formats/json_text.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

namespace zest {
namespace {

namespace fs = std::filesystem;

DatasetFormat parse_format(const JsonField& doc) {
  std::vector<std::pair<std::string, DatasetFormat>> choices;
  for (const DatasetFormatSpec& spec : dataset_format_specs()) choices.emplace_back(spec.file_name, spec.format);
  return doc.at("format").choice_among<DatasetFormat>(choices);
}

// Largest accepted width and shard size: far above any real dataset, small enough that sizes computed
// from them (a sample's bytes, a shard's tensor shapes) cannot overflow.
constexpr int64_t kMaxFeatureWidth = int64_t{1} << 24;
constexpr int64_t kMaxShardSamples = int64_t{1} << 32;

std::map<std::string, int64_t> parse_features(const JsonField& doc, DatasetFormat format) {
  const JsonField widths = doc.at("features");
  std::map<std::string, int64_t> features = widths.integer_map(std::numeric_limits<int64_t>::min(), kMaxFeatureWidth);
  const DatasetFormatSpec& spec = dataset_format_spec(format);
  for (const std::string& name : spec.required_features) {
    const JsonField width = widths.at(name);
    if (!width.exists()) width.fail(str("is missing (", spec.file_name, " needs it)"));
    const bool may_be_zero = std::find(spec.may_be_zero.begin(), spec.may_be_zero.end(), name) != spec.may_be_zero.end();
    width.integer(may_be_zero ? 0 : 1, kMaxFeatureWidth);
  }
  return features;
}

// Shard names are checked against the folder here (no absolute path, no "..", no link leading out, no
// FIFO or device) and kept in their normal spelling, so "./shard-0" and "shard-0" are one file.
std::vector<ShardEntry> parse_shards(const std::string& dir, const JsonField& doc) {
  const JsonField list = doc.at("shards");
  if (!list.is_array() || list.size() == 0) list.expected("a non-empty array of {\"file\": ..., \"samples\": ...}");
  std::vector<ShardEntry> shards;
  std::map<std::string, size_t> seen;  // normal name → index of its first entry
  const std::vector<JsonField> entries = list.items();
  for (size_t i = 0; i < entries.size(); ++i) {
    const JsonField& entry = entries[i];
    const std::string given = entry.at("file").string();
    confined_path(dir, given, {doc.file(), str("shards[", i, "].file")}, /*must_exist=*/false);
    ShardEntry shard{normal_name(given), entry.at("samples").integer(1, kMaxShardSamples)};
    if (entry.has("height") != entry.has("width"))
      entry.fail("gives only one of \"height\" and \"width\" (a bucket's latent size needs both)");
    if (entry.has("height")) shard.height = entry.at("height").integer(1, kMaxFeatureWidth);
    if (entry.has("width")) shard.width = entry.at("width").integer(1, kMaxFeatureWidth);
    const auto [first, inserted] = seen.emplace(shard.file, i);
    ZEST_CHECK(inserted, doc.file(), ": shards[", i, "] (\"", printable(given), "\") and shards[", first->second,
               "] name the same file ", printable(shard.file), "; list each shard once");
    shards.push_back(std::move(shard));
  }
  return shards;
}

}  // namespace


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
  const nlohmann::json document = parse_json(read_text_file(path, "dataset listing (dataset.json)", 256ull << 20), path);
  const JsonField doc(document, path);
  doc.object();
  DatasetManifest m;
  m.format = parse_format(doc);
  m.features = parse_features(doc, m.format);
  m.shards = parse_shards(dir, doc);
  if (doc.has("stats")) {
    const std::string given = doc.at("stats").string();
    confined_path(dir, given, {path, "stats"}, /*must_exist=*/false);
    m.stats_file = normal_name(given);
    for (const ShardEntry& shard : m.shards)
      ZEST_CHECK(shard.file != m.stats_file, path, ": \"stats\" names the shard ", printable(shard.file),
                 "; the statistics need a file of their own");
  }
  if (doc.has("empty_prompt")) {
    const std::string given = doc.at("empty_prompt").string();
    confined_path(dir, given, {path, "empty_prompt"}, /*must_exist=*/false);
    m.empty_prompt_file = normal_name(given);
  }
  if (doc.at("source").is_string()) m.source = doc.at("source").string();  // informational
  return m;
}

void write_manifest(const std::string& dir, const DatasetManifest& m) {
  nlohmann::json doc;
  doc["format"] = format_name(m.format);
  doc["features"] = nlohmann::json::object();
  for (const auto& [name, value] : m.features) doc["features"][name] = value;
  if (!m.stats_file.empty()) doc["stats"] = m.stats_file;
  doc["shards"] = nlohmann::json::array();
  if (!m.empty_prompt_file.empty()) doc["empty_prompt"] = m.empty_prompt_file;
  for (const ShardEntry& shard : m.shards) {
    nlohmann::json entry = {{"file", shard.file}, {"samples", shard.samples}};
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
