// One run per run folder (a second `zest train` on a train.run_dir in use refuses at once, naming the
// other process; a lock left by a dead process never blocks), and a resume on another dataset of the
// same size is refused by its fingerprint (dataset_fingerprint in the checkpoint's data position), and a
// checkpoint whose own records (extra.data, extra.model_source) are corrupt is refused naming the manifest
// and the field.
#include "checkpoint/directory.h"
#include "checkpoint/manifest.h"
#include "cli/cli_test_util.h"
#include "common/read_text.h"
#include "common/error_of.h"
#include "common/temp_dir.h"
#include "launch_test_util.h"
#include "train/run_lock.h"

#include "core/check.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>

namespace zest::testing {
namespace {

namespace fs = std::filesystem;

TEST(RunLock, SecondHolderIsRefusedNamingTheFirst) {
  const TempDir dir("run_lock");
  {
    const RunLock first(dir.path());
    EXPECT_TRUE(first.is_held());
    const std::string message = error_of([&] { RunLock second(dir.path()); });
    EXPECT_NE(message.find("train.run_dir '" + dir.path() + "' is in use by another zest train (pid " +
                           std::to_string(::getpid()) + " on "),
              std::string::npos)
        << message;
    EXPECT_NE(message.find("give this run its own train.run_dir"), std::string::npos) << message;
  }
  const RunLock again(dir.path());  // released with the first holder
  EXPECT_TRUE(again.is_held());
}

TEST(RunLock, LockOfADeadProcessNeverBlocks) {
  const TempDir dir("run_lock_stale");
  const pid_t child = ::fork();
  if (child == 0) {
    const RunLock held(dir.path());
    ::_exit(0);  // dies holding it: no destructor, the kernel releases the lock
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_TRUE(fs::exists(dir.sub(kRunLockName)));
  EXPECT_EQ(error_of([&] { RunLock after(dir.path()); }), "");
}

class RunFolder : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir("run_folder");
    for (const auto& [name, seed] : {std::pair<const char*, const char*>{"a", "1"}, {"b", "2"}}) {
      const CliResult synth = run_cli({zest_binary(), "data", "synth", "--model", "hymotion_tiny", "--out",
                                       dir_->sub(name), "--samples", "24", "--seed", seed});
      ASSERT_EQ(synth.code(), 0) << synth.describe();
    }
  }
  static void TearDownTestSuite() { delete dir_; }

  static std::string run_file(const std::string& name, const std::string& data) {
    const std::string path = dir_->sub(name + ".toml");
    std::ofstream(path) << "[model]\nname = \"hymotion_tiny\"\n[data]\ndir = \"" << dir_->sub(data)
                        << "\"\nbatch_size = 4\nseq_len = 12\nnum_workers = 1\n[engine]\nprecision = \"fp32\"\n"
                        << "[train]\nmax_steps = 2\nrun_dir = \"" << dir_->sub(name) << "\"\n"
                        << "[checkpoint]\nevery_steps = 2\n";
    return path;
  }
  static CliResult train(const std::string& run, std::vector<std::string> extra = {}) {
    std::vector<std::string> argv{zest_binary(), "train", run};
    argv.insert(argv.end(), extra.begin(), extra.end());
    CliOptions options;
    options.timeout_s = 300;
    return run_cli(argv, options);
  }
  static inline TempDir* dir_ = nullptr;
};

// Two runs on one run_dir both exited 0; the second replaced the first's checkpoints.
TEST_F(RunFolder, SecondTrainOnARunDirInUseRefusesAtOnce) {
  const std::string run = run_file("busy", "a");
  fs::create_directories(dir_->sub("busy"));
  const RunLock other(dir_->sub("busy"));  // stands for a run in progress
  const CliResult second = train(run);
  EXPECT_EQ(second.code(), 1) << second.describe();
  EXPECT_NE(second.err.find("is in use by another zest train (pid " + std::to_string(::getpid())), std::string::npos)
      << second.describe();
  EXPECT_LT(second.seconds, 60.0);
  EXPECT_FALSE(fs::exists(dir_->sub("busy/config.toml"))) << "the refused run wrote into the folder";
  EXPECT_FALSE(fs::exists(dir_->sub("busy/metrics.jsonl")));
}

// Resuming with a different dataset of the same size said nothing.
TEST_F(RunFolder, ResumeOnAnotherDatasetOfTheSameSizeIsRefused) {
  const std::string run = run_file("fingerprint", "a");
  const CliResult first = train(run);
  ASSERT_EQ(first.code(), 0) << first.describe();
  const CliResult other = train(run, {"--set", "data.dir=\"" + dir_->sub("b") + "\"", "--set", "train.max_steps=4"});
  EXPECT_EQ(other.code(), 1) << other.describe();
  EXPECT_NE(other.err.find("the checkpoint was trained on another dataset than data.dir '" + dir_->sub("b") +
                           "' holds: both have 24 samples, but the contents differ (dataset fingerprint"),
            std::string::npos)
      << other.describe();
  const CliResult same = train(run, {"--set", "train.max_steps=4"});
  EXPECT_EQ(same.code(), 0) << same.describe();
}

// The checkpoint's records edited with the manifest checksum made to match (what a corrupt or hand-edited
// record that passes the manifest's own checks looks like): the resume names the manifest and the field,
// never the JSON library's text ("[json.exception.type_error.302] type must be number, but is string").
TEST_F(RunFolder, CorruptCheckpointRecordsAreNamedByManifestAndField) {
  const std::string run = run_file("records", "a");
  const CliResult first = train(run);
  ASSERT_EQ(first.code(), 0) << first.describe();
  const std::optional<std::string> step = checkpoint::find_latest(dir_->sub("records/checkpoints"));
  ASSERT_TRUE(step.has_value());
  const std::string manifest = (fs::path(*step) / checkpoint::kManifestName).string();
  const std::string saved = read_text(manifest);
  auto resume_with = [&](const std::function<void(nlohmann::ordered_json&)>& edit) {
    nlohmann::ordered_json doc = nlohmann::ordered_json::parse(saved);
    edit(doc["extra"]);
    std::ofstream(manifest, std::ios::trunc) << checkpoint::with_manifest_checksum(doc.dump(), manifest);
    return train(run, {"--set", "train.max_steps=4"});
  };
  const CliResult data = resume_with([](auto& extra) { extra["data"]["epoch"] = "zero"; });
  EXPECT_EQ(data.code(), 1) << data.describe();
  EXPECT_NE(data.err.find("manifest.json: field 'extra.data.epoch' must be an integer >= 0, got a string (\"zero\")"),
            std::string::npos)
      << data.describe();
  const CliResult source = resume_with([](auto& extra) { extra["model_source"]["family"] = 5; });
  EXPECT_EQ(source.code(), 1) << source.describe();
  EXPECT_NE(source.err.find("manifest.json: field 'extra.model_source.family' must be a string, got an integer (5)"),
            std::string::npos)
      << source.describe();
  for (const CliResult* r : {&data, &source}) EXPECT_EQ(r->err.find("json.exception"), std::string::npos) << r->describe();
  std::ofstream(manifest, std::ios::trunc) << saved;
  const CliResult again = train(run, {"--set", "train.max_steps=4"});
  EXPECT_EQ(again.code(), 0) << again.describe();
}

}  // namespace
}  // namespace zest::testing
