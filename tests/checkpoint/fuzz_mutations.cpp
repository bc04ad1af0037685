// Checkpoint mutations for the fuzz test (see fuzz_mutations.h).
#include "fuzz_mutations.h"

#include "checkpoint/checksum.h"
#include "checkpoint/manifest.h"
#include "formats/safetensors.h"
#include "core/check.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>

namespace zest::testing {
namespace {
namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;
using Pointer = Json::json_pointer;

const char* kLatestStep = "step_00000005";
const char* kOlderStep = "step_00000003";

template <typename T>
T pick(std::mt19937& rng, const std::vector<T>& values) {
  return values[std::uniform_int_distribution<size_t>(0, values.size() - 1)(rng)];
}
int64_t uniform(std::mt19937& rng, int64_t lo, int64_t hi) {
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}
// A position in [0, size).
size_t position(std::mt19937& rng, size_t size) {
  return static_cast<size_t>(uniform(rng, 0, static_cast<int64_t>(size) - 1));
}
bool coin(std::mt19937& rng, double p) { return std::bernoulli_distribution(p)(rng); }

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

// ---- manifest edits ----

struct ManifestEdit {
  std::string root;
  std::string path() const { return root + "/" + kLatestStep + "/manifest.json"; }
  Json load() const { return Json::parse(read_text(path())); }
  // rehash: the checksum is recomputed, so only the layout rules (not the checksum) can object.
  void save(const Json& j, bool rehash) const {
    const std::string text = j.dump(1);
    write_text(path(), rehash ? checkpoint::with_manifest_checksum(text, path()) : text);
  }
};

// Every member and element below the root, depth first.
void collect(const Json& value, const Pointer& at, std::vector<Pointer>& out) {
  if (value.is_object()) {
    for (const auto& [key, child] : value.items()) {
      out.push_back(at / key);
      collect(child, at / key, out);
    }
  } else if (value.is_array()) {
    for (size_t i = 0; i < value.size(); ++i) {
      out.push_back(at / i);
      collect(value[i], at / i, out);
    }
  }
}

std::vector<Pointer> paths_where(const Json& j, const std::function<bool(const Pointer&, const Json&)>& keep) {
  std::vector<Pointer> all, out;
  collect(j, Pointer(), all);
  for (const Pointer& p : all)
    if (keep(p, j.at(p))) out.push_back(p);
  return out;
}

// A consistent manifest that drops or renames a tied name cannot be told from a model without the tie,
// so rehashed edits leave the aliases alone (unrehashed edits of them are still made).
bool touches_aliases(const Pointer& p) { return p.to_string().find("/aliases") != std::string::npos; }

void erase_at(Json& j, const Pointer& p) {
  Json& parent = j.at(p.parent_pointer());
  if (parent.is_object()) {
    parent.erase(p.back());
  } else {
    parent.erase(static_cast<size_t>(std::stoul(p.back())));
  }
}

Mutation manifest_delete(const std::string& root, std::mt19937& rng) {
  const ManifestEdit edit{root};
  Json j = edit.load();
  const bool rehash = coin(rng, 0.6);
  const auto paths = paths_where(j, [&](const Pointer& p, const Json&) { return !(rehash && touches_aliases(p)); });
  const Pointer p = pick(rng, paths);
  erase_at(j, p);
  edit.save(j, rehash);
  return {"manifest: field deleted", "deleted " + p.to_string() + (rehash ? " (rehashed)" : ""),
          rehash ? Expect::either : Expect::refused, rehash};
}

Json value_of_another_type(const Json& old, std::mt19937& rng) {
  const std::vector<Json> values = {Json("x"), Json(7), Json(1.5), Json(true), Json(nullptr), Json::array(),
                                    Json::object(), Json(-3)};
  while (true) {
    Json v = pick(rng, values);
    const bool same = v.type() == old.type() || (v.is_number_integer() && old.is_number_integer());
    if (!same) return v;
  }
}

Mutation manifest_retype(const std::string& root, std::mt19937& rng) {
  const ManifestEdit edit{root};
  Json j = edit.load();
  const bool rehash = coin(rng, 0.6);
  const auto paths = paths_where(j, [&](const Pointer& p, const Json&) { return !(rehash && touches_aliases(p)); });
  const Pointer p = pick(rng, paths);
  const Json v = value_of_another_type(j.at(p), rng);
  j.at(p) = v;
  edit.save(j, rehash);
  return {"manifest: type changed", p.to_string() + " = " + v.dump() + (rehash ? " (rehashed)" : ""),
          rehash ? Expect::either : Expect::refused, rehash};
}

Mutation manifest_number(const std::string& root, std::mt19937& rng) {
  const ManifestEdit edit{root};
  Json j = edit.load();
  const auto paths = paths_where(j, [](const Pointer&, const Json& v) { return v.is_number(); });
  const Pointer p = pick(rng, paths);
  const Json old = j.at(p);
  const int64_t n = old.is_number_integer() ? old.get<int64_t>() : 1;
  const std::vector<Json> values = {Json(-1), Json(-5), Json(0), Json(n + 1), Json(n - 1), Json(n * 2),
                                    Json(int64_t{1} << 62), Json(std::numeric_limits<int64_t>::max()),
                                    Json(std::numeric_limits<int64_t>::min()),
                                    Json(std::numeric_limits<uint64_t>::max()), Json(1e300), Json(-0.5)};
  Json v = pick(rng, values);
  while (v == old) v = pick(rng, values);
  j.at(p) = v;
  const bool rehash = coin(rng, 0.7);
  edit.save(j, rehash);
  return {"manifest: number out of range", p.to_string() + " = " + v.dump() + (rehash ? " (rehashed)" : ""),
          rehash ? Expect::either : Expect::refused, rehash};
}

// Targeted layout lies: each contradicts a layout rule or the rank files, except swapping two units
// (order does not matter: a valid manifest). A transposed shape keeps every rule, so it is only made
// without rehashing (the checksum must catch it).
std::string lie_about_layout(Json& j, std::mt19937& rng, bool& rehash) {
  Json& units = j["units"];
  const size_t u = static_cast<size_t>(uniform(rng, 1, 2));  // blocks.0 / blocks.1: four parameters each
  Json& params = units[u]["params"];
  const size_t a = position(rng, 4);
  const size_t b = (a + 1 + position(rng, 3)) % 4;
  switch (uniform(rng, 0, 15)) {
    case 0: std::swap(params[a]["offset"], params[b]["offset"]); return "swapped two offsets";
    case 1: params[a]["offset"] = params[b]["offset"]; return "overlapping offsets";
    case 2: params[a]["offset"] = params[a]["offset"].get<int64_t>() + (coin(rng, 0.5) ? 1 : -1); return "offset ±1";
    case 3: std::swap(params[a], params[b]); return "two parameter entries swapped";
    case 4: std::swap(units[1], units[2]); return "two units swapped";
    case 5: params.push_back(params[a]); return "parameter entry duplicated";
    case 6: params.erase(a); return "parameter entry removed";
    case 7: params[a]["numel"] = params[a]["numel"].get<int64_t>() + 1; return "numel +1";
    case 8: params[a]["shape"] = {3, 3, 3}; return "shape with another numel";
    case 9: params[a]["dtype"] = pick(rng, std::vector<std::string>{"BF16", "F16", "I32", "F64"}); return "dtype";
    case 10:
      units[u]["padded_numel"] = units[u]["padded_numel"].get<int64_t>() + 32;
      units[u]["shard_numel"] = units[u]["shard_numel"].get<int64_t>() + 16;
      return "padding grown";
    case 11:
      j["kinds"] = pick(rng, std::vector<Json>{Json::array({"master", "exp_avg"}),
                                               Json::array({"master", "exp_avg_sq", "exp_avg"}),
                                               Json::array({"master", "exp_avg", "exp_avg_sq", "foo"}),
                                               Json::array({"master", "master", "exp_avg"}), Json::array({"momentum"}),
                                               Json::array({"master", "ema", "exp_avg", "exp_avg_sq"}),
                                               Json::array({"master", "exp_avg", "exp_avg_sq", "ema", "ema"})});
      return "kinds " + j["kinds"].dump();
    case 12: j["optimizer"]["name"] = "sgd"; return "optimizer sgd";
    case 13: std::swap(j["files"][0], j["files"][1]); return "file entries swapped";
    case 14: params[a]["name"] = params[b]["name"]; return "two parameters with one name";
    default: {
      Json& shape = units[0]["params"][0]["shape"];  // embed.weight [13, 7] → [7, 13]
      std::swap(shape[0], shape[1]);
      rehash = false;
      return "shape transposed";
    }
  }
}

Mutation manifest_layout(const std::string& root, std::mt19937& rng) {
  const ManifestEdit edit{root};
  Json j = edit.load();
  bool rehash = coin(rng, 0.8);
  const std::string what = lie_about_layout(j, rng, rehash);
  edit.save(j, rehash);
  return {"manifest: layout lie", what + (rehash ? " (rehashed)" : ""), rehash ? Expect::either : Expect::refused,
          rehash};
}

Mutation manifest_checksums(const std::string& root, std::mt19937& rng) {
  const ManifestEdit edit{root};
  Json j = edit.load();
  const int r = static_cast<int>(uniform(rng, 0, 1));
  std::string what;
  switch (uniform(rng, 0, 3)) {
    case 0: {
      std::string hash = j["files"][r]["xxh64"];
      hash[static_cast<size_t>(uniform(rng, 0, 15))] ^= 0x01;  // '0'↔'1', 'a'↔'`' (not hex: refused too)
      j["files"][r]["xxh64"] = hash;
      what = "a file's xxh64 changed";
      break;
    }
    case 1: j["files"][r]["bytes"] = j["files"][r]["bytes"].get<int64_t>() + pick(rng, std::vector<int64_t>{-1, 1, 8});
            what = "a file's byte count changed"; break;
    case 2: j["files"][r]["xxh64"] = "not-a-checksum"; what = "a file's xxh64 is not hex"; break;
    default: {
      std::string hash = j["manifest_xxh64"];
      hash[static_cast<size_t>(uniform(rng, 0, 15))] ^= 0x01;
      j["manifest_xxh64"] = hash;
      edit.save(j, false);
      return {"manifest: bad checksum", "manifest_xxh64 changed", Expect::refused};
    }
  }
  const bool rehash = coin(rng, 0.5);
  edit.save(j, rehash);
  return {"manifest: bad checksum", what + (rehash ? " (rehashed)" : ""), Expect::refused, rehash};
}

Mutation manifest_text(const std::string& root, std::mt19937& rng) {
  const ManifestEdit edit{root};
  std::string text = read_text(edit.path());
  std::string what;
  switch (uniform(rng, 0, 4)) {
    case 0: text.resize(position(rng, text.size())); what = "truncated"; break;
    case 1: text[position(rng, text.size())] ^= 0x04; what = "a byte flipped"; break;
    case 2: text = "[]"; what = "an array"; break;
    case 3: text = ""; what = "empty"; break;
    default: text += "}garbage"; what = "trailing garbage";
  }
  write_text(edit.path(), text);
  return {"manifest: damaged text", what, Expect::refused};
}

// ---- rank files ----

std::string rank_file(const std::string& root, const char* step, int rank) {
  return root + "/" + step + "/rank_0000" + std::to_string(rank) + ".safetensors";
}

void flip_bytes(const std::string& path, uint64_t lo, uint64_t hi, int count, std::mt19937& rng) {
  std::string bytes = read_text(path);
  for (int i = 0; i < count; ++i) {
    const auto at = static_cast<size_t>(uniform(rng, static_cast<int64_t>(lo), static_cast<int64_t>(hi) - 1));
    bytes[at] = static_cast<char>(bytes[at] ^ static_cast<char>(uniform(rng, 1, 255)));
  }
  write_text(path, bytes);
}

Mutation rank_header_bytes(const std::string& root, std::mt19937& rng) {
  const int r = static_cast<int>(uniform(rng, 0, 1));
  const std::string path = rank_file(root, kLatestStep, r);
  const uint64_t data_start = safetensors::Reader(path).data_start();
  const int count = static_cast<int>(uniform(rng, 1, 3));
  flip_bytes(path, 0, data_start, count, rng);
  return {"rank file: header bytes flipped", std::to_string(count) + " byte(s) of rank " + std::to_string(r),
          Expect::refused};
}

Mutation rank_data_bytes(const std::string& root, std::mt19937& rng) {
  const int r = static_cast<int>(uniform(rng, 0, 1));
  const std::string path = rank_file(root, kLatestStep, r);
  const safetensors::Reader reader(path);
  const int count = static_cast<int>(uniform(rng, 1, 4));
  flip_bytes(path, reader.data_start(), reader.file_bytes(), count, rng);
  return {"rank file: data bytes flipped", std::to_string(count) + " byte(s) of rank " + std::to_string(r),
          Expect::refused};
}

// A rank file rewritten with another identity in its header, and the manifest updated to match its new
// size and checksum: only the identity check can refuse it.
Mutation rank_identity(const std::string& root, std::mt19937& rng) {
  const int r = static_cast<int>(uniform(rng, 0, 1));
  const std::string path = rank_file(root, kLatestStep, r);
  safetensors::Metadata metadata = safetensors::Reader(path).metadata();
  const std::string key = pick(rng, std::vector<std::string>{"rank", "step", "world_size", "format"});
  metadata[key] = key == "format" ? "other" : key == "rank" ? std::to_string(1 - r) : key == "step" ? "3" : "4";
  safetensors::save_file(path, safetensors::load_file(path), metadata);
  const ManifestEdit edit{root};
  Json j = edit.load();
  j["files"][r]["bytes"] = fs::file_size(path);
  j["files"][r]["xxh64"] = checkpoint::to_hex(checkpoint::xxh64_file(path));
  edit.save(j, true);
  return {"rank file: identity (consistent)", "header " + key + " = " + metadata[key] + " in rank " +
          std::to_string(r) + ", manifest updated", Expect::refused, true};
}

Mutation files_damaged(const std::string& root, std::mt19937& rng) {
  const int r = static_cast<int>(uniform(rng, 0, 1));
  const std::string path = rank_file(root, kLatestStep, r), other = rank_file(root, kLatestStep, 1 - r);
  switch (uniform(rng, 0, 7)) {
    case 0: fs::remove(path); return {"files: missing / replaced", "rank file removed", Expect::refused};
    case 1: fs::remove(root + "/" + kLatestStep + "/manifest.json");
            return {"files: missing / replaced", "manifest removed", Expect::either};  // falls back to step 3
    case 2: fs::resize_file(path, position(rng, fs::file_size(path)));
            return {"files: missing / replaced", "rank file truncated", Expect::refused};
    case 3: fs::copy_file(other, path, fs::copy_options::overwrite_existing);
            return {"files: missing / replaced", "rank file duplicated over the other", Expect::refused};
    case 4: fs::rename(path, path + ".x"); fs::rename(other, path); fs::rename(path + ".x", other);
            return {"files: missing / replaced", "rank files swapped", Expect::refused};
    case 5: fs::copy_file(rank_file(root, kOlderStep, r), path, fs::copy_options::overwrite_existing);
            return {"files: missing / replaced", "rank file from step 3", Expect::refused};
    case 6: fs::copy_file(root + "/" + kOlderStep + "/manifest.json", root + "/" + kLatestStep + "/manifest.json",
                          fs::copy_options::overwrite_existing);
            return {"files: missing / replaced", "manifest from step 3", Expect::refused};
    default: fs::remove(path); fs::create_directory(path);
             return {"files: missing / replaced", "rank file replaced by a folder", Expect::refused};
  }
}

Mutation files_extra(const std::string& root, std::mt19937& rng) {
  const std::string dir = root + "/" + kLatestStep;
  switch (uniform(rng, 0, 2)) {
    case 0: fs::copy_file(dir + "/rank_00000.safetensors", dir + "/rank_00002.safetensors");
            return {"files: extra", "rank_00002 added", Expect::ok};
    case 1: write_text(dir + "/notes.txt", "hello"); return {"files: extra", "a text file added", Expect::ok};
    default: fs::create_directory(root + "/step_00000007.tmp");
             return {"files: extra", "an interrupted save's folder", Expect::ok};
  }
}

Mutation latest_pointer(const std::string& root, std::mt19937& rng) {
  const std::string latest = root + "/latest";
  switch (uniform(rng, 0, 6)) {
    case 0: write_text(latest, "step_00000099\n"); return {"latest", "names a missing step", Expect::ok};
    case 1: write_text(latest, "nonsense"); return {"latest", "garbage", Expect::ok};
    case 2: write_text(latest, ""); return {"latest", "empty", Expect::ok};
    case 3: fs::remove(latest); return {"latest", "removed", Expect::ok};
    case 4: fs::remove(latest); fs::create_directory(latest); return {"latest", "a folder", Expect::either};
    case 5: write_text(latest, "step_00000003\n"); return {"latest", "names the older step", Expect::ok};
    default: write_text(latest, "../step_00000005\n"); return {"latest", "names a path", Expect::ok};
  }
}

}  // namespace

const std::vector<std::string>& fuzz_categories() {
  static const std::vector<std::string> categories = {
      "manifest: field deleted", "manifest: type changed", "manifest: number out of range",
      "manifest: layout lie", "manifest: bad checksum", "manifest: damaged text",
      "rank file: header bytes flipped", "rank file: data bytes flipped", "rank file: identity (consistent)",
      "files: missing / replaced", "files: extra", "latest"};
  return categories;
}

Mutation mutate_checkpoint(const std::string& root, const std::string& category, std::mt19937& rng) {
  using Fn = Mutation (*)(const std::string&, std::mt19937&);
  const std::vector<std::pair<std::string, Fn>> table = {
      {"manifest: field deleted", manifest_delete},       {"manifest: type changed", manifest_retype},
      {"manifest: number out of range", manifest_number}, {"manifest: layout lie", manifest_layout},
      {"manifest: bad checksum", manifest_checksums},     {"manifest: damaged text", manifest_text},
      {"rank file: header bytes flipped", rank_header_bytes}, {"rank file: data bytes flipped", rank_data_bytes},
      {"rank file: identity (consistent)", rank_identity}, {"files: missing / replaced", files_damaged},
      {"files: extra", files_extra},                       {"latest", latest_pointer}};
  for (const auto& [name, fn] : table)
    if (name == category) return fn(root, rng);
  ZEST_FAIL("unknown fuzz category ", category);
}

}  // namespace zest::testing
