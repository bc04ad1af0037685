// What `zest train` writes, in-process: every write failure is an error (metrics.jsonl, the progress
// output, config.toml) except a closed stdout; folders are checked before training; and the data
// position saved with checkpoints, in its global form and the older per-rank one.
#include "common/scoped_switch.h"
#include "common/temp_dir.h"

#include "comm/self_communicator.h"
#include "core/check.h"
#include "core/config_reader.h"
#include "data/model_features.h"
#include "data/synth.h"
#include "models/hymotion/packed_tokens.h"
#include "train/progress.h"
#include "train/run_config.h"
#include "train/run_folder.h"
#include "train/train_data.h"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace zest::testing {
namespace {

namespace fs = std::filesystem;

std::string file_text(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Expects `fn` to throw zest::Error with every part in its message.
template <typename Fn>
void expect_error(Fn&& fn, const std::vector<std::string>& parts) {
  try {
    fn();
  } catch (const Error& e) {
    for (const std::string& part : parts)
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << "missing '" << part << "' in: " << e.what();
    return;
  }
  ADD_FAILURE() << "no error; expected one mentioning '" << parts.front() << "'";
}

// Points stdout at `fd` for the lifetime of the object (flushing around the swap).
class StdoutRedirect {
 public:
  explicit StdoutRedirect(int fd) : saved_(::dup(STDOUT_FILENO)) {
    std::fflush(stdout);
    ::dup2(fd, STDOUT_FILENO);
  }
  ~StdoutRedirect() {
    std::fflush(stdout);
    std::clearerr(stdout);
    ::dup2(saved_, STDOUT_FILENO);
    ::close(saved_);
  }

 private:
  int saved_;
};

StepRecord record_of(int64_t step) {
  StepRecord r;
  r.step = step;
  r.loss = 1.5;
  return r;
}

TEST(RunOutputs, MetricsWriteFailureIsAnError) {
  ProgressReporter progress(true, 10, "/dev/full", "frames");
  const int null = ::open("/dev/null", O_WRONLY);
  StdoutRedirect quiet(null);
  expect_error([&] { progress.record(record_of(1)); }, {"cannot write /dev/full: No space left on device"});
  ::close(null);
}

TEST(RunOutputs, ProgressOutputOnAFullDiskIsAnErrorButAClosedPipeIsNot) {
  const int full = ::open("/dev/full", O_WRONLY);
  {
    ProgressReporter progress(true, 10, "", "frames");
    StdoutRedirect redirect(full);
    expect_error([&] { progress.message("hello"); }, {"cannot write the progress output (stdout): No space left"});
  }
  ::close(full);
  // The reader of our stdout is gone (`zest launch` was killed): output is dropped, the run goes on.
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  ::close(fds[0]);
  const auto previous = std::signal(SIGPIPE, SIG_IGN);
  {
    ProgressReporter progress(true, 10, "", "frames");
    StdoutRedirect redirect(fds[1]);
    EXPECT_NO_THROW(progress.message("nobody reads this"));
    EXPECT_NO_THROW(progress.record(record_of(1)));
    EXPECT_NO_THROW(progress.finish());
  }
  std::signal(SIGPIPE, previous);
  ::close(fds[1]);
}

// A write cut short by a file-size limit (a full disk, as far as the writer can tell) leaves the
// previous config.toml whole and no temporary file behind.
TEST(RunOutputs, ConfigFileIsReplacedWholeOrNotAtAll) {
  const TempDir dir("outputs_config");
  const std::string path = dir.file("config.toml");
  write_file_atomically(path, "old = 1\n");
  EXPECT_EQ(file_text(path), "old = 1\n");
  const auto previous = std::signal(SIGXFSZ, SIG_IGN);
  rlimit saved{};
  ::getrlimit(RLIMIT_FSIZE, &saved);
  rlimit tiny = saved;
  tiny.rlim_cur = 100;
  ::setrlimit(RLIMIT_FSIZE, &tiny);
  std::string message;
  try {
    write_file_atomically(path, std::string(1000, 'x'));
  } catch (const Error& e) {
    message = e.what();
  }
  ::setrlimit(RLIMIT_FSIZE, &saved);
  std::signal(SIGXFSZ, previous);
  EXPECT_NE(message.find("cannot write " + path + ": File too large"), std::string::npos) << message;
  EXPECT_EQ(file_text(path), "old = 1\n");
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

TEST(RunOutputs, UnusableFoldersAreFoundAtStart) {
  const TempDir dir("outputs_dirs");
  std::ofstream(dir.file("a_file")) << "x";
  expect_error([&] { ensure_writable_dir(dir.file("a_file"), "checkpoint.dir"); },
               {"checkpoint.dir '" + dir.file("a_file") + "' exists and is not a folder"});
  expect_error([&] { ensure_writable_dir(dir.file("a_file") + "/ckpt", "checkpoint.dir"); },
               {"cannot create checkpoint.dir", "a_file/ckpt"});
  EXPECT_NO_THROW(ensure_writable_dir(dir.file("new/nested"), "train.run_dir"));
  EXPECT_TRUE(fs::is_directory(dir.file("new/nested")));
  EXPECT_TRUE(fs::is_empty(dir.file("new/nested"))) << "the probe file was left behind";
  if (::geteuid() != 0) {  // root writes anywhere: only a non-root run can see a read-only folder
    fs::create_directories(dir.file("locked"));
    fs::permissions(dir.file("locked"), fs::perms::owner_read | fs::perms::owner_exec);
    expect_error([&] { ensure_writable_dir(dir.file("locked"), "checkpoint.dir"); }, {"is not writable"});
    fs::permissions(dir.file("locked"), fs::perms::owner_all);
  }
}

// The input-memory check: half of the budget for the loader's batches, and the largest value that fits.
TEST(RunOutputs, InputMemoryCheckSaysWhatFits) {
  DataConfig data;
  data.batch_size = 100;
  data.num_workers = 1;  // the loader may hold 2 + 2 + 1 = 5 batches
  EXPECT_EQ(loader_batches_held(1), 5);
  EXPECT_EQ(loader_batches_held(0), 2);
  const SampleBytes sample{1000, 0, 0};                    // 1 KB per sample, no frames
  EXPECT_NO_THROW(check_inputs_fit(data, sample, {1e6, "available memory"}));  // 500 KB ≤ 500 KB
  data.batch_size = 101;
  expect_error([&] { check_inputs_fit(data, sample, {1e6, "ulimit -v"}); },
               {"data.batch_size = 101 does not fit", "a batch of 101 is 101.0 KB", "may hold 5 batches: 505.0 KB",
                "more than half of the 1.0 MB left (ulimit -v)", "at most data.batch_size = 100 fits"});
  data.batch_size = 2;
  const SampleBytes frames{100, 50, 1'000'000};  // 50 MB per sample
  expect_error([&] { check_inputs_fit(data, frames, {1e8, "the cgroup limit"}); },
               {"data.seq_len = 1000000 does not fit", "even with data.batch_size = 1 at most data.seq_len = 199998 fits"});
}

// The data position of a 16-sample dataset, through TrainData as `zest train` uses it.
class DataPosition : public ::testing::Test {
 protected:
  void SetUp() override {
    SynthOptions synth;
    synth.samples = 16;
    synthesize_dataset(dir_.sub("data"), builtin_model_features("hymotion_tiny"), synth);
    ConfigTable table = ConfigTable::parse_string(
        "[model]\nname = \"hymotion_tiny\"\n[data]\ndir = \"" + dir_.sub("data") + "\"\nbatch_size = 3\nseq_len = 8\n",
        "run.toml");
    config_ = run_config_from_toml(table);
    model_ = resolve_run_model(config_);
  }
  TempDir dir_{"outputs_position"};
  RunConfig config_;
  ResolvedModel model_;
  SelfCommunicator comm_;
};

TEST_F(DataPosition, SavedAsAGlobalPositionAndReadBackInBothForms) {
  TrainData data(config_, model_, comm_);
  for (int i = 0; i < 3; ++i) data.next();
  const nlohmann::json saved = data.state();
  const std::string fingerprint = saved.value("dataset_fingerprint", std::string());
  EXPECT_EQ(fingerprint.size(), 16u) << saved.dump();
  EXPECT_EQ(saved, (nlohmann::json{{"epoch", 0}, {"consumed", 9}, {"dataset_size", 16}, {"dataset_fingerprint", fingerprint}}));

  TrainData resumed(config_, model_, comm_);
  resumed.load_state(saved, /*saved_world_size=*/4);  // the global form ignores the saved world size
  EXPECT_EQ(resumed.state(), saved);
  // The form before: {"epoch", "index"} per rank; 2 ranks at index 3 had read 6 positions together.
  TrainData old(config_, model_, comm_);
  old.load_state(nlohmann::json{{"epoch", 1}, {"index", 3}}, /*saved_world_size=*/2);
  EXPECT_EQ(old.state(), (nlohmann::json{{"epoch", 1}, {"consumed", 6}, {"dataset_size", 16}, {"dataset_fingerprint", fingerprint}}));
  // A checkpoint written before the fingerprint (no dataset_fingerprint) still resumes.
  TrainData before(config_, model_, comm_);
  before.load_state(nlohmann::json{{"epoch", 0}, {"consumed", 9}, {"dataset_size", 16}}, 1);
  EXPECT_EQ(before.state(), saved);
}

TEST_F(DataPosition, PositionsThatCannotBeHonouredAreClearErrors) {
  TrainData data(config_, model_, comm_);
  expect_error([&] { data.load_state(nlohmann::json{{"epoch", 0}, {"consumed", 3}, {"dataset_size", 20}}, 1); },
               {"trained on a dataset of 20 samples", "has 16"});
  expect_error([&] { data.load_state(nlohmann::json{{"epoch", 0}, {"consumed", 16}, {"dataset_size", 16}}, 1); },
               {"outside an epoch of 16 samples"});
  // Another dataset of the same size (its fingerprint differs): refused, naming both fingerprints.
  expect_error([&] {
    data.load_state(nlohmann::json{{"epoch", 0}, {"consumed", 3}, {"dataset_size", 16}, {"dataset_fingerprint", "0123456789abcdef"}}, 1);
  }, {"trained on another dataset than data.dir", "both have 16 samples", "0123456789abcdef"});
  expect_error([&] { data.load_state(nlohmann::json{{"epoch", 0}, {"index", 9}}, 2); }, {"outside an epoch of 16 samples"});
  expect_error([&] { data.load_state(nlohmann::json{{"epoch", "zero"}, {"index", 1}}, 1); },
               {"the data position: field 'epoch' must be an integer >= 0, got a string (\"zero\")"});
  expect_error([&] { data.load_state(nlohmann::json::object(), 1); }, {"field 'epoch' is missing (expected an integer >= 0)"});
  expect_error([&] { data.load_state(nlohmann::json{{"epoch", 0}, {"consumed", 3}, {"dataset_size", 16}, {"dataset_fingerprint", 7}}, 1); },
               {"field 'dataset_fingerprint' must be a string, got an integer (7)"});
}

// The step's batches come prepared by the family (models/registry.h's prepare_batch): HY-Motion's packed-token
// indices made on the host before the copy to the device, so that the step reads nothing there; none when the
// kernel switch is off.
TEST_F(DataPosition, TheStepsBatchesCarryThePackingMadeAhead) {
  for (const bool packed : {true, false}) {
    SCOPED_TRACE(packed ? "packed_tokens on" : "packed_tokens off");
    const ScopedSwitch packing(hymotion::packed_tokens_enabled, hymotion::set_packed_tokens, packed);
    TrainData data(config_, model_, comm_);
    const HostBatch batch = data.next_for_step();
    EXPECT_EQ(batch.tensors.count("packed_tokens.motion_rows"), packed ? 1u : 0u);
    const auto p = hymotion::packed_tokens_of(batch.tensors);
    ASSERT_EQ(p != nullptr, packed);
    if (!packed) continue;
    EXPECT_EQ(p->batch, 3);
    const int64_t valid_frames = batch.tensors.at("x_mask_temporal").sum().item<int64_t>();
    EXPECT_GE(p->motion_rows.size(0), valid_frames);  // every valid frame kept, rounded up to a bucket
  }
}

}  // namespace
}  // namespace zest::testing
