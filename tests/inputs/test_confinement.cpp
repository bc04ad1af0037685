// Paths that come from inside files stay in their folder: dataset.json shards and stats, safetensors
// index weight_map entries; FIFOs, devices and links out are refused with one message naming the file,
// the entry and the path; `data synth --overwrite` removes only its own listing's files; run outputs
// (metrics.jsonl, config.toml, safetensors files) are never written through a planted link.
#include "inputs/inputs_test_util.h"

#include "formats/safetensors.h"
#include "core/untrusted_file.h"
#include "data/dataset.h"
#include "data/model_features.h"
#include "data/motion_stats.h"
#include "data/synth.h"
#include "models/pretrained_source.h"
#include "models/pretrained_weights.h"
#include "train/progress.h"
#include "train/run_folder.h"

#include <nlohmann/json.hpp>

#include <sys/stat.h>

#include <chrono>
#include <future>

namespace zest::testing {
namespace {

namespace fs = std::filesystem;

// scratch/ (the folder a command owns) beside victims/ (files nothing may touch).
struct Layout {
  TempDir root{"confine"};
  std::string scratch = root.sub("scratch");
  Victims victims{(fs::create_directories(root.sub("victims")), root.sub("victims"))};
};

DatasetManifest small_dataset(const std::string& dir) {
  SynthOptions o;
  o.samples = 6;
  o.samples_per_shard = 3;
  return synthesize_dataset(dir, builtin_model_features("hymotion_tiny"), o);
}

// dataset.json of `dir` with `edit` applied to its JSON.
void edit_listing(const std::string& dir, const std::function<void(nlohmann::json&)>& edit) {
  const std::string path = dir + "/dataset.json";
  nlohmann::json doc = nlohmann::json::parse(read_text(path));
  edit(doc);
  write_text(path, doc.dump(2));
}

TEST(Confinement, ConfinedPathRefusesEveryWayOut) {
  Layout l;
  fs::create_directories(l.scratch);
  write_text(l.scratch + "/a.bin", "x");
  const PathEntry entry{"L.json", "files[0]"};
  EXPECT_EQ(confined_path(l.scratch, "./a.bin", entry), l.scratch + "/a.bin");
  expect_zest_error([&] { confined_path(l.scratch, "/etc/hostname", entry); },
               {"L.json: files[0] = \"/etc/hostname\"", "an absolute path", "must lie inside"});
  expect_zest_error([&] { confined_path(l.scratch, "../victims/v1.txt", entry); },
               {"files[0] = \"../victims/v1.txt\"", "leaves the folder"});
  expect_zest_error([&] { confined_path(l.scratch, "sub/../../victims/v1.txt", entry); }, {"leaves the folder"});
  expect_zest_error([&] { confined_path(l.scratch, "", entry); }, {"an empty file name"});
  fs::create_symlink(l.victims.path(0), l.scratch + "/link.txt");
  expect_zest_error([&] { confined_path(l.scratch, "link.txt", entry); },
               {"files[0] = \"link.txt\"", "outside the folder", "symbolic link"});
  fs::create_directory_symlink(l.victims.folder(), l.scratch + "/dirlink");
  expect_zest_error([&] { confined_path(l.scratch, "dirlink/new.txt", entry, false); }, {"outside the folder"});
  ASSERT_EQ(::mkfifo((l.scratch + "/fifo").c_str(), 0644), 0);
  expect_zest_error([&] { confined_path(l.scratch, "fifo", entry); }, {"is a FIFO (named pipe)", "not a regular file"});
  expect_zest_error([&] { confined_path(l.scratch, "missing", entry); }, {"does not exist"});
  EXPECT_EQ(confined_path(l.scratch, "missing", entry, false), l.scratch + "/missing");
  fs::create_symlink("a.bin", l.scratch + "/inner_link");  // a link that stays inside is fine
  EXPECT_EQ(confined_path(l.scratch, "inner_link", entry), l.scratch + "/inner_link");
  EXPECT_EQ(l.victims.changed(), "");
}

TEST(Confinement, PrintableEscapesTerminalControls) {
  EXPECT_EQ(printable("plain name.weight"), "plain name.weight");
  EXPECT_EQ(printable("\x1b[31mred\x1b[0m"), "\\x1b[31mred\\x1b[0m");
  EXPECT_EQ(printable("a\nb\\c"), "a\\x0ab\\x5cc");
  EXPECT_EQ(printable("caf\xc3\xa9"), "caf\xc3\xa9");        // UTF-8 kept
  EXPECT_EQ(printable("\xc2\x9b" "2J"), "\\xc2\\x9b2J");     // C1 CSI escaped
  EXPECT_EQ(printable("\xff\xfe"), "\\xff\\xfe");            // invalid bytes escaped
  EXPECT_EQ(printable(std::string(500, 'a'), 10), std::string(10, 'a') + "... (490 characters left out)");
}

// The cases: "file": "../victims/v1.txt" and "stats": "/tmp/x/v2.txt" made --overwrite delete both.
TEST(Confinement, SynthOverwriteNeverDeletesOutsideTheFolder) {
  Layout l;
  small_dataset(l.scratch);
  edit_listing(l.scratch, [&](nlohmann::json& doc) {
    doc["shards"][0]["file"] = "../victims/v1.txt";
    doc["stats"] = l.victims.path(1);
  });
  SynthOptions o;
  o.samples = 4;
  o.overwrite = true;
  expect_zest_error([&] { synthesize_dataset(l.scratch, builtin_model_features("hymotion_tiny"), o); },
               {l.scratch + "/dataset.json", "shards[0].file = \"../victims/v1.txt\"", "leaves the folder"});
  EXPECT_EQ(l.victims.changed(), "");
  edit_listing(l.scratch, [&](nlohmann::json& doc) { doc["shards"][0]["file"] = "shard-00000.safetensors"; });
  expect_zest_error([&] { synthesize_dataset(l.scratch, builtin_model_features("hymotion_tiny"), o); },
               {"stats = \"" + l.victims.path(1) + "\"", "an absolute path"});
  EXPECT_EQ(l.victims.changed(), "");
  EXPECT_TRUE(fs::exists(l.scratch + "/shard-00000.safetensors")) << "a refused overwrite removed files";
}

TEST(Confinement, SynthOverwriteRemovesOnlyItsListing) {
  Layout l;
  small_dataset(l.scratch);
  write_text(l.scratch + "/notes.txt", "mine");
  SynthOptions o;
  o.samples = 2;
  o.overwrite = true;
  const DatasetManifest m = synthesize_dataset(l.scratch, builtin_model_features("hymotion_tiny"), o);
  EXPECT_EQ(m.shards.size(), 1u);
  EXPECT_FALSE(fs::exists(l.scratch + "/shard-00001.safetensors")) << "the old listing's second shard stays";
  EXPECT_EQ(read_text(l.scratch + "/notes.txt"), "mine");
  for (const auto& entry : fs::directory_iterator(l.scratch))
    EXPECT_EQ(entry.path().filename().string().rfind(".zest-synth-", 0), std::string::npos) << "staging left";
  // A file the new dataset would replace but no listing names is not ours: refused, kept.
  const std::string other = l.root.sub("other");
  write_text(other + "/shard-00000.safetensors", "someone else's");
  expect_zest_error([&] { synthesize_dataset(other, builtin_model_features("hymotion_tiny"), o); },
               {"shard-00000.safetensors exists and is not part of a dataset", "does not replace files"});
  EXPECT_EQ(read_text(other + "/shard-00000.safetensors"), "someone else's");
}

TEST(Confinement, DatasetShardsAndStatsStayInTheFolder) {
  Layout l;
  small_dataset(l.scratch);
  const std::string listing = l.scratch + "/dataset.json";
  edit_listing(l.scratch, [](nlohmann::json& doc) { doc["shards"][0]["file"] = "../../../../etc/passwd"; });
  expect_zest_error([&] { open_dataset(l.scratch); }, {listing, "shards[0].file = \"../../../../etc/passwd\"", "leaves"});
  // An absolute path to another dataset's shard is not trained on.
  const std::string other = l.root.sub("other");
  small_dataset(other);
  edit_listing(l.scratch, [&](nlohmann::json& doc) { doc["shards"][0]["file"] = other + "/shard-00000.safetensors"; });
  expect_zest_error([&] { open_dataset(l.scratch); }, {listing, "an absolute path"});
  // A link to another dataset's shard, or to /dev/zero.
  fs::create_symlink(other + "/shard-00000.safetensors", l.scratch + "/linked.safetensors");
  edit_listing(l.scratch, [](nlohmann::json& doc) { doc["shards"][0]["file"] = "linked.safetensors"; });
  expect_zest_error([&] { open_dataset(l.scratch); }, {"outside the folder"});
  fs::create_symlink("/dev/zero", l.scratch + "/zero.safetensors");
  edit_listing(l.scratch, [](nlohmann::json& doc) { doc["shards"][0]["file"] = "zero.safetensors"; });
  expect_zest_error([&] { open_dataset(l.scratch); }, {"resolves to /dev/zero, outside the folder"});
  // A shard listed twice under two spellings.
  edit_listing(l.scratch, [](nlohmann::json& doc) {
    doc["shards"][0]["file"] = "shard-00000.safetensors";
    doc["shards"][1]["file"] = "./shard-00000.safetensors";
  });
  expect_zest_error([&] { read_manifest(l.scratch); },
               {"shards[1] (\"./shard-00000.safetensors\") and shards[0] name the same file shard-00000.safetensors"});
  EXPECT_EQ(l.victims.changed(), "");
}

// `zest data stats` wrote to whatever "stats" named.
TEST(Confinement, StatsAreNeverWrittenOutside) {
  Layout l;
  const DatasetManifest m = small_dataset(l.scratch);
  DatasetManifest hostile = m;
  hostile.stats_file = "../victims/v2.txt";
  expect_zest_error([&] { hostile.stats_path(l.scratch, false); }, {"stats = \"../victims/v2.txt\"", "leaves the folder"});
  // A planted link at stats.safetensors.tmp does not redirect the write.
  fs::create_symlink(l.victims.path(2), l.scratch + "/stats.safetensors.tmp");
  expect_zest_error([&] { write_motion_stats(m.stats_path(l.scratch, false), compute_motion_stats(l.scratch, m)); },
               {"stats.safetensors.tmp", "symbolic link"});
  EXPECT_EQ(l.victims.changed(), "");
}

TEST(Confinement, IndexWeightMapStaysInItsFolder) {
  Layout l;
  const std::string folder = l.scratch + "/model";
  fs::create_directories(folder);
  safetensors::save_file(folder + "/part.safetensors", {{"w", torch::ones({2})}});
  safetensors::save_file(l.root.sub("outside.safetensors"), {{"w", torch::ones({2})}});
  const std::string index = folder + "/diffusion_pytorch_model.safetensors.index.json";
  auto open_with = [&](const std::string& file) {
    write_text(index, nlohmann::json{{"weight_map", {{"w", file}}}}.dump());
    return PretrainedWeights::open({kSafetensorsFormat, "", "", index});
  };
  EXPECT_EQ(open_with("./part.safetensors")->tensors().size(), 1u);
  expect_zest_error([&] { open_with("../../outside.safetensors"); },
               {index, "weight_map[\"w\"] = \"../../outside.safetensors\"", "leaves the folder"});
  expect_zest_error([&] { open_with("/etc/hostname"); }, {index, "weight_map[\"w\"] = \"/etc/hostname\"", "absolute"});
  ASSERT_EQ(::mkfifo((folder + "/fifo.safetensors").c_str(), 0644), 0);
  auto pending = std::async(std::launch::async, [&] { return zest_error_of([&] { open_with("fifo.safetensors"); }); });
  ASSERT_EQ(pending.wait_for(std::chrono::seconds(20)), std::future_status::ready) << "a FIFO entry blocked";
  EXPECT_NE(pending.get().find("is a FIFO"), std::string::npos);
  EXPECT_EQ(l.victims.changed(), "");
}

// A pretrained file that is a FIFO or a link to /dev/zero: a clear message at once ("not a regular file").
TEST(Confinement, PretrainedFileMustBeARegularFile) {
  Layout l;
  fs::create_directories(l.scratch);
  fs::create_symlink("/dev/zero", l.scratch + "/zero.safetensors");
  expect_zest_error([&] { find_pretrained_layout(l.scratch + "/zero.safetensors"); },
               {"zero.safetensors: cannot open pretrained weights: it is a character device",
                "a symbolic link to /dev/zero", "not a regular file"});
  ASSERT_EQ(::mkfifo((l.scratch + "/fifo.safetensors").c_str(), 0644), 0);
  auto pending = std::async(std::launch::async, [&] {
    return zest_error_of([&] { safetensors::Reader reader(l.scratch + "/fifo.safetensors"); });
  });
  ASSERT_EQ(pending.wait_for(std::chrono::seconds(20)), std::future_status::ready) << "opening a FIFO blocked";
  EXPECT_NE(pending.get().find("it is a FIFO"), std::string::npos);
  fs::create_symlink("nowhere.safetensors", l.scratch + "/dangling.safetensors");
  expect_zest_error([&] { safetensors::Reader reader(l.scratch + "/dangling.safetensors"); },
               {"a symbolic link to nowhere.safetensors", "target does not exist"});
}

// run_dir/metrics.jsonl as a symbolic link was followed and appended to.
TEST(Confinement, RunOutputsAreNeverWrittenThroughLinks) {
  Layout l;
  fs::create_directories(l.scratch);
  fs::create_symlink(l.victims.path(0), l.scratch + "/metrics.jsonl");
  expect_zest_error([&] { ProgressReporter progress(true, 10, l.scratch + "/metrics.jsonl", "frames"); },
               {"metrics.jsonl", "symbolic link"});
  fs::create_symlink(l.victims.path(1), l.scratch + "/config.toml.tmp");
  write_file_atomically(l.scratch + "/config.toml", "a = 1\n");
  EXPECT_EQ(read_text(l.scratch + "/config.toml"), "a = 1\n");
  fs::create_symlink(l.victims.path(2), l.scratch + "/w.safetensors");
  expect_zest_error([&] { safetensors::Writer writer(l.scratch + "/w.safetensors", {{"a", torch::kFloat32, {1}}}); },
               {"symbolic link"});
  EXPECT_EQ(l.victims.changed(), "");
}

}  // namespace
}  // namespace zest::testing
