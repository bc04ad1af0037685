// `zest data synth|stats|check` on datasets written by strangers, through the built binary: listed paths
// that leave the folder are refused and nothing outside it is deleted or overwritten; non-finite values
// and shards listed twice are reported; an absurd --samples is refused, not clamped; a stop signal during
// `data synth` leaves the folder as it was. Every refusal is one clear line.
#include "cli/cli_test_util.h"
#include "common/temp_dir.h"

#include "formats/safetensors.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <fstream>
#include <sstream>
#include <thread>

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

namespace zest::testing {
namespace {

namespace fs = std::filesystem;

std::string untrusted_read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

void untrusted_write_text(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

class UntrustedData : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::create_directories(victims_);
    untrusted_write_text(victims_ + "/v1.txt", "victim one\n");
    untrusted_write_text(victims_ + "/v2.txt", "victim two\n");
  }
  CliResult zest(std::vector<std::string> args, double timeout_s = 120) {
    args.insert(args.begin(), zest_binary());
    CliOptions options;
    options.timeout_s = timeout_s;
    return run_cli(args, options);
  }
  void synth(const std::string& out, int samples = 8, const std::string& per_shard = "4") {
    const CliResult r = zest({"data", "synth", "--model", "hymotion_tiny", "--out", out, "--samples",
                              std::to_string(samples), "--shard-size", per_shard});
    ASSERT_EQ(r.code(), 0) << r.describe();
  }
  void edit_listing(const std::string& dir, const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json doc = nlohmann::json::parse(untrusted_read_text(dir + "/dataset.json"));
    edit(doc);
    untrusted_write_text(dir + "/dataset.json", doc.dump(2));
  }
  void expect_refused(const CliResult& r, const std::vector<std::string>& parts) {
    EXPECT_EQ(r.code(), 1) << r.describe();
    EXPECT_EQ(one_clear_error_line(r.err), "") << r.describe();
    for (const std::string& part : parts) EXPECT_NE(r.err.find(part), std::string::npos) << part << "\n" << r.describe();
  }
  void expect_victims_untouched() {
    EXPECT_EQ(untrusted_read_text(victims_ + "/v1.txt"), "victim one\n");
    EXPECT_EQ(untrusted_read_text(victims_ + "/v2.txt"), "victim two\n");
  }

  TempDir root_{"untrusted_data"};
  std::string ds_ = root_.sub("ds");
  std::string victims_ = root_.sub("victims");
};

// The case: `zest data synth ... --overwrite` exited 0 having deleted both files.
TEST_F(UntrustedData, SynthOverwriteDeletesNothingOutside) {
  synth(ds_);
  edit_listing(ds_, [&](nlohmann::json& doc) {
    doc["shards"][0]["file"] = "../victims/v1.txt";
    doc["stats"] = victims_ + "/v2.txt";
  });
  expect_refused(zest({"data", "synth", "--model", "hymotion_tiny", "--out", ds_, "--samples", "64", "--overwrite"}),
                 {"dataset.json: shards[0].file = \"../victims/v1.txt\"", "leaves the folder"});
  expect_victims_untouched();
}

// `zest data stats ds` overwrote the file "stats" named.
TEST_F(UntrustedData, StatsNeverOverwriteOutside) {
  synth(ds_);
  edit_listing(ds_, [&](nlohmann::json& doc) { doc["stats"] = "../victims/v2.txt"; });
  expect_refused(zest({"data", "stats", ds_}), {"stats = \"../victims/v2.txt\"", "leaves the folder"});
  edit_listing(ds_, [&](nlohmann::json& doc) { doc["stats"] = victims_ + "/v2.txt"; });
  expect_refused(zest({"data", "stats", ds_}), {"an absolute path"});
  expect_victims_untouched();
}

// `zest data check` printed /etc/passwd's first 8 bytes as a "header length"; an absolute shard was used.
TEST_F(UntrustedData, CheckRefusesShardsOutsideTheFolder) {
  synth(ds_);
  edit_listing(ds_, [](nlohmann::json& doc) { doc["shards"][0]["file"] = "../../../../etc/passwd"; });
  const CliResult passwd = zest({"data", "check", ds_});
  expect_refused(passwd, {"shards[0].file = \"../../../../etc/passwd\"", "leaves the folder"});
  EXPECT_EQ(passwd.err.find("header length"), std::string::npos) << passwd.err;
  const std::string other = root_.sub("other");
  synth(other);
  edit_listing(ds_, [&](nlohmann::json& doc) { doc["shards"][0]["file"] = other + "/shard-00000.safetensors"; });
  expect_refused(zest({"data", "check", ds_}), {"an absolute path"});
}

TEST_F(UntrustedData, CheckReportsShardsListedTwice) {
  synth(ds_);
  edit_listing(ds_, [](nlohmann::json& doc) { doc["shards"][1]["file"] = "./shard-00000.safetensors"; });
  expect_refused(zest({"data", "check", ds_}), {"shards[1] (\"./shard-00000.safetensors\") and shards[0] name the same "
                                                "file shard-00000.safetensors"});
}

// Shards that are all NaN or hold an Inf passed `zest data check`.
TEST_F(UntrustedData, CheckReportsNonFiniteValuesWithTheSample) {
  synth(ds_);
  const std::string first = ds_ + "/shard-00000.safetensors", second = ds_ + "/shard-00001.safetensors";
  auto tensors = safetensors::load_file(first);
  for (auto& [name, t] : tensors) {
    if (name != "motion") continue;
    const auto offsets = safetensors::Reader(first).read("motion_offsets");
    t[offsets[2].item<int64_t>()][0] = INFINITY;  // sample 2 of the shard
  }
  safetensors::save_file(first, tensors);
  auto all_nan = safetensors::load_file(second);
  for (auto& [name, t] : all_nan)
    if (name == "text_pooled") t.fill_(NAN);
  safetensors::save_file(second, all_nan);
  expect_refused(zest({"data", "check", ds_}),
                 {"non-finite values (NaN or Inf) in 2 tensor(s)",
                  "shard-00000.safetensors tensor 'motion' (1 values, first in sample 2 of the shard = sample 2 of the dataset)",
                  "shard-00001.safetensors tensor 'text_pooled'", "first in sample 0 of the shard = sample 4 of the dataset"});
}

// `--samples 99999999999999999999999` was clamped and started writing.
TEST_F(UntrustedData, AbsurdSampleCountIsRefused) {
  const CliResult r = zest({"data", "synth", "--model", "hymotion_tiny", "--out", ds_, "--samples",
                            "99999999999999999999999"});
  expect_refused(r, {"--samples '99999999999999999999999' is not an integer zest accepts"});
  EXPECT_FALSE(fs::exists(ds_ + "/dataset.json"));
  expect_refused(zest({"data", "synth", "--model", "hymotion_tiny", "--out", ds_, "--samples", "9999999999999"}),
                 {"--samples 9999999999999 must be in [1, 4294967296]"});
}

// SIGTERM during `data synth --overwrite`: the old dataset stays whole, no partial file is left.
TEST_F(UntrustedData, StopSignalDuringSynthLeavesTheFolderAsItWas) {
  synth(ds_, 8);
  const std::string before = untrusted_read_text(ds_ + "/dataset.json");
  const std::string out_log = root_.sub("synth.out"), err_log = root_.sub("synth.err");
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(::open(out_log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644), 1);
    ::dup2(::open(err_log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644), 2);
    ::execl(zest_binary().c_str(), zest_binary().c_str(), "data", "synth", "--model", "hymotion_tiny", "--out", ds_.c_str(),
            "--samples", "200000", "--shard-size", "20", "--overwrite", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  // Wait until the new dataset has begun (a shard in the staging folder), then stop it.
  bool started = false;
  for (int waited = 0; waited < 1200 && !started; ++waited) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    for (const auto& entry : fs::directory_iterator(ds_))
      if (entry.path().filename().string().rfind(".zest-synth-", 0) == 0 && !fs::is_empty(entry.path())) started = true;
  }
  ::kill(pid, SIGTERM);
  CliResult result;
  ::waitpid(pid, &result.status, 0);
  result.out = untrusted_read_text(out_log);
  result.err = untrusted_read_text(err_log);
  ASSERT_TRUE(started) << "the synth never started writing\n" << result.describe();
  expect_refused(result, {"stopped by SIGTERM while", "temporary files were removed and nothing was replaced"});
  EXPECT_EQ(untrusted_read_text(ds_ + "/dataset.json"), before);
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(ds_)) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"dataset.json", "shard-00000.safetensors", "shard-00001.safetensors",
                                             "stats.safetensors"}));
  const CliResult check = zest({"data", "check", ds_});
  EXPECT_EQ(check.code(), 0) << check.describe();
}

}  // namespace
}  // namespace zest::testing
