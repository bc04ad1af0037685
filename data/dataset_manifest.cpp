// dataset.json: parsing with validation (every error names the file and the field) and atomic writing.
#include "data/dataset_manifest.h"

#include "core/check.h"

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

std::map<std::string, int64_t> parse_features(const std::string& path, const Json& doc, DatasetFormat format) {
  ZEST_CHECK(doc.contains("features") && doc["features"].is_object(), path,
             ": needs a \"features\" object with the widths");
  std::map<std::string, int64_t> features;
  for (const auto& [name, value] : doc["features"].items()) {
    ZEST_CHECK(value.is_number_integer(), path, ": features.", name, " must be an integer, got ", value.dump());
    features[name] = value.get<int64_t>();
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

std::vector<ShardEntry> parse_shards(const std::string& path, const Json& doc) {
  ZEST_CHECK(doc.contains("shards") && doc["shards"].is_array() && !doc["shards"].empty(), path,
             ": needs a non-empty \"shards\" list of {\"file\": ..., \"samples\": ...}");
  std::vector<ShardEntry> shards;
  std::set<std::string> seen;
  for (size_t i = 0; i < doc["shards"].size(); ++i) {
    const Json& entry = doc["shards"][i];
    ZEST_CHECK(entry.is_object() && entry.contains("file") && entry["file"].is_string() &&
                   entry.contains("samples") && entry["samples"].is_number_integer(),
               path, ": shards[", i, "] must be {\"file\": STRING, \"samples\": INTEGER}, got ", entry.dump());
    ShardEntry shard{entry["file"].get<std::string>(), entry["samples"].get<int64_t>()};
    ZEST_CHECK(shard.samples > 0, path, ": shards[", i, "] (", shard.file, ") has ", shard.samples,
               " samples; must be > 0");
    ZEST_CHECK(seen.insert(shard.file).second, path, ": shard file ", shard.file, " is listed twice");
    shards.push_back(std::move(shard));
  }
  return shards;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  ZEST_CHECK(in.good(), path, ": cannot open (is this a dataset folder? it needs dataset.json; "
                              "`zest data synth` writes one)");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
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

DatasetManifest read_manifest(const std::string& dir) {
  const std::string path = (fs::path(dir) / "dataset.json").string();
  Json doc;
  try {
    doc = Json::parse(read_text(path));
  } catch (const Json::exception& e) {
    ZEST_FAIL(path, ": not valid JSON: ", e.what());
  }
  ZEST_CHECK(doc.is_object(), path, ": must hold a JSON object");
  DatasetManifest m;
  m.format = parse_format(path, doc);
  m.features = parse_features(path, doc, m.format);
  m.shards = parse_shards(path, doc);
  if (doc.contains("stats")) {
    ZEST_CHECK(doc["stats"].is_string(), path, ": \"stats\" must be a file name");
    m.stats_file = doc["stats"].get<std::string>();
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
  for (const ShardEntry& shard : m.shards) doc["shards"].push_back({{"file", shard.file}, {"samples", shard.samples}});
  if (!m.source.empty()) doc["source"] = m.source;
  const fs::path path = fs::path(dir) / "dataset.json";
  const fs::path tmp = fs::path(dir) / "dataset.json.tmp";
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
