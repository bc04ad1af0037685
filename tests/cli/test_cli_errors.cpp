// User errors of the `zest` binary end in one clear line, never a C++ stack trace: LibTorch's errors and
// allocation failures, run files that are folders or devices, values that cannot fit (batch_size,
// seq_len, num_workers, threads, launch -n, estimate --params), and a relative model.config resolved once.
#include "cli_test_util.h"
#include "common/temp_dir.h"

#include "core/check.h"
#include "train/error_report.h"
#include "train/run_config.h"

#include <gtest/gtest.h>

#include <c10/util/Exception.h>
#include <torch/torch.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>

namespace zest::testing {
namespace {

namespace fs = std::filesystem;

void write_text(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << text;
}

// A failed run: exit status 1 and one clear line on stderr holding every part.
void expect_one_line_error(const CliResult& r, const std::vector<std::string>& parts) {
  ASSERT_FALSE(r.timed_out) << r.describe();
  ASSERT_TRUE(r.exited()) << r.describe();
  EXPECT_EQ(r.code(), 1) << r.describe();
  EXPECT_EQ(one_clear_error_line(r.err), "") << r.describe();
  for (const std::string& part : parts) EXPECT_NE(r.err.find(part), std::string::npos) << "missing '" << part << "'\n" << r.describe();
}

TEST(ErrorReport, LibTorchErrorsLoseTheirTraceUnlessDebugging) {
  try {
    TORCH_CHECK(false, "shapes do not match\nsecond line");
  } catch (const std::exception& e) {
    ASSERT_NE(std::string(e.what()).find("Exception raised from"), std::string::npos);  // the raw text has it
    ::unsetenv("ZEST_DEBUG");
    EXPECT_EQ(describe_error(e), "shapes do not match; second line");
    ::setenv("ZEST_DEBUG", "1", 1);
    EXPECT_NE(describe_error(e).find("Exception raised from"), std::string::npos);
    ::unsetenv("ZEST_DEBUG");
    EXPECT_FALSE(is_out_of_memory(e));
  }
}

// After install_error_reporting (first thing in main) LibTorch captures no stack trace at all: capturing
// one under a memory limit crashed inside c10::get_backtrace.
TEST(ErrorReport, NoStackTraceIsCapturedOnceInstalled) {
  ::unsetenv("ZEST_DEBUG");
  install_error_reporting();
  try {
    TORCH_CHECK(false, "bad value");
  } catch (const c10::Error& e) {
    const std::string text = e.what();
    EXPECT_NE(text.find("set ZEST_DEBUG=1 for a C++ stack trace"), std::string::npos) << text;
    EXPECT_EQ(text.find("frame #"), std::string::npos) << text;
  }
}

TEST(ErrorReport, AllocationFailuresSayWhatDidNotFit) {
  try {
    auto huge = torch::empty({int64_t{1} << 52}, torch::kUInt8);  // 4.5 PB: refused by the allocator
    FAIL() << "allocated " << huge.numel() << " bytes";
  } catch (const std::exception& e) {
    EXPECT_TRUE(is_out_of_memory(e));
    EXPECT_EQ(describe_error(e), "out of memory: an allocation of 4.5 PB did not fit");
  }
  const std::bad_alloc bad;
  EXPECT_TRUE(is_out_of_memory(bad));
  EXPECT_EQ(describe_error(bad).rfind("out of memory", 0), 0u);
  const Error plain("data.dir: missing");
  EXPECT_EQ(describe_error(plain), "data.dir: missing");
}

TEST(CliErrors, RunFileThatIsNotAFile) {
  const TempDir dir("cli_runfile");
  expect_one_line_error(run_cli({zest_binary(), "config", "check", dir.path()}), {dir.path(), "is a folder, not a run file"});
  expect_one_line_error(run_cli({zest_binary(), "train", dir.path()}), {"is a folder, not a run file"});
  expect_one_line_error(run_cli({zest_binary(), "config", "check", dir.sub("absent.toml")}), {"absent.toml: run file not found"});
  // A device would be read forever.
  CliOptions bounded;
  bounded.timeout_s = 20;
  expect_one_line_error(run_cli({zest_binary(), "config", "check", "/dev/zero"}, bounded),
                        {"/dev/zero: is not a regular file"});
}

// Output that cannot be written is an error of every command (a full disk behind `> file`), and a
// file-size limit makes a write fail with a message instead of killing the process (SIGXFSZ).
TEST(CliErrors, WriteFailuresAreErrors) {
  const TempDir dir("cli_writes");
  write_text(fs::path(dir.path()) / "run.toml", "[model]\nname = \"hymotion_tiny\"\n[data]\ndir = \"d\"\n");
  CliOptions to_full;
  to_full.stdout_path = "/dev/full";
  expect_one_line_error(run_cli({zest_binary(), "config", "check", dir.sub("run.toml")}, to_full),
                        {"cannot write the output (stdout): No space left on device"});
  CliOptions small_files;
  small_files.file_size_limit = 4096;
  expect_one_line_error(run_cli({zest_binary(), "data", "synth", "--model", "hymotion_tiny", "--out", dir.sub("data"),
                                 "--samples", "64"}, small_files),
                        {"File too large"});
}

// Found by the fuzz (seeds 2 and 6): a path with a newline was quoted back over two lines, and a path
// too long for the file system escaped as a std::filesystem error. Both are one zest::Error line now.
TEST(CliErrors, PathValuesThatBreakMessagesStayOneLine) {
  const TempDir dir("cli_paths");
  const fs::path run = fs::path(dir.path()) / "run.toml";
  for (const std::string& value : {std::string("a\\nb.toml"), std::string(5000, 'p')}) {
    write_text(run, "[model]\nconfig = \"" + value + "\"\n[data]\ndir = \"d\"\n");
    try {
      parse_run_config(run.string());
      ADD_FAILURE() << "accepted " << value.substr(0, 20);
    } catch (const Error& e) {
      const std::string text = e.what();
      EXPECT_EQ(text.find('\n'), std::string::npos) << text.substr(0, 300);
      EXPECT_EQ(text.rfind(run.string(), 0), 0u) << text.substr(0, 300);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "not a zest::Error: " << std::string(e.what()).substr(0, 300);
    }
  }
}

// A megabyte value echoed back by the error stays a readable line: cut in the middle.
TEST(CliErrors, HugeValuesAreCutFromTheMessage) {
  const TempDir dir("cli_huge");
  write_text(fs::path(dir.path()) / "run.toml", "[model]\nname = \"hymotion_tiny\"\n[data]\ndir = \"d\"\n[engine]\n"
                                                "precision = \"" + std::string(1 << 20, 'a') + "\"\n");
  const CliResult r = run_cli({zest_binary(), "config", "check", dir.sub("run.toml")});
  expect_one_line_error(r, {"run.toml:6:13: engine.precision: \"aaaa", "characters left out", "\"fp16\""});
  EXPECT_LT(r.err.size(), 5000u);
}

TEST(CliErrors, LaunchRankCountSaysWhatItTakes) {
  for (const char* n : {"0", "-3", "2.5", "100000"}) {
    const CliResult r = run_cli({zest_binary(), "launch", "-n", n, "true"});
    EXPECT_NE(r.code(), 0) << r.describe();
    EXPECT_NE(r.err.find("--nproc: must be a whole number between 1 and 1024 (ranks to start on this machine), got '" +
                         std::string(n) + "'"), std::string::npos) << r.describe();
    EXPECT_EQ(r.err.find("1.79e308"), std::string::npos) << r.describe();
  }
  const CliResult grace = run_cli({zest_binary(), "launch", "-n", "1", "--grace", "1e300", "true"});
  EXPECT_NE(grace.err.find("--grace: must be a number between 0 and 3600 (seconds)"), std::string::npos) << grace.describe();
}

// Every printed byte count must be non-negative: 16 bytes of 1e18 parameters overflowed int64 before.
TEST(CliErrors, EstimateRefusesAbsurdParameterCounts) {
  expect_one_line_error(run_cli({zest_binary(), "estimate", "--params", "1e18", "--world", "1"}),
                        {"--params must be a whole number between 1 and 1e15, got 1e18"});
  expect_one_line_error(run_cli({zest_binary(), "estimate", "--params", "1000000000000000000", "--world", "1"}),
                        {"between 1 and 1e15"});
  expect_one_line_error(run_cli({zest_binary(), "estimate", "--params", "seven", "--world", "1"}), {"got 'seven'"});
  expect_one_line_error(run_cli({zest_binary(), "estimate", "--params", "1e9", "--world", "0"}),
                        {"--world must be between 1 and 1000000 ranks, got 0"});
  const CliResult largest = run_cli({zest_binary(), "estimate", "--params", "1e15", "--world", "1", "--precision", "fp32"});
  ASSERT_EQ(largest.code(), 0) << largest.describe();
  EXPECT_NE(largest.out.find("20000000.000"), std::string::npos) << largest.out;  // 20 bytes · 1e15 parameters
  const std::regex negative(" -[0-9]");
  EXPECT_FALSE(std::regex_search(largest.out, negative)) << largest.out;
}

// `config check` accepted a relative model.config that `train` then looked for at cfg/cfg/...
TEST(CliErrors, RelativeModelConfigIsResolvedOnce) {
  const TempDir dir("cli_relmodel");
  const fs::path root = dir.path();
  fs::create_directories(root / "cfg");
  fs::copy_file(fs::path(ZEST_SOURCE_DIR) / "configs/models/hymotion_tiny.toml", root / "cfg/hymotion_mine.toml");
  write_text(root / "cfg/run.toml", "[model]\nconfig = \"hymotion_mine.toml\"\n[data]\ndir = \"no_data_here\"\n"
                                    "[engine]\nprecision = \"fp32\"\n[train]\nmax_steps = 1\nrun_dir = \"out\"\n");
  CliOptions in_root;
  in_root.cwd = root.string();
  const CliResult check = run_cli({zest_binary(), "config", "check", "cfg/run.toml"}, in_root);
  ASSERT_EQ(check.code(), 0) << check.describe();
  const CliResult estimate = run_cli({zest_binary(), "estimate", "--config", "cfg/run.toml", "--world", "1"}, in_root);
  ASSERT_EQ(estimate.code(), 0) << estimate.describe();
  EXPECT_NE(estimate.out.find("181,036 parameters"), std::string::npos) << estimate.describe();
  // Beside the model state, the activations of the run's micro-batch (no dataset yet: the family's shapes).
  for (const std::string part : {"activations per rank and micro-batch (data.batch_size = ", "default shapes",
                                 "activation_checkpointing = \"none\": ", "activation_checkpointing = \"all\": "})
    EXPECT_NE(estimate.out.find(part), std::string::npos) << "missing '" << part << "': " << estimate.describe();
  // train builds the model, then stops at the data: proof that the model file was found.
  const CliResult train = run_cli({zest_binary(), "train", "cfg/run.toml"}, in_root);
  expect_one_line_error(train, {"data.dir 'no_data_here'", "holds no dataset.json"});
  EXPECT_EQ(train.err.find("cfg/cfg"), std::string::npos) << train.describe();
}

TEST(CliErrors, LoaderAndThreadCountsAreBounded) {
  const TempDir dir("cli_bounds");
  const fs::path run = fs::path(dir.path()) / "run.toml";
  write_text(run, "[model]\nname = \"hymotion_tiny\"\n[data]\ndir = \"d\"\n");
  expect_one_line_error(run_cli({zest_binary(), "config", "check", run.string(), "--set", "data.num_workers=100000"}),
                        {"data.num_workers: must be between 0 and 64"});
  expect_one_line_error(run_cli({zest_binary(), "config", "check", run.string(), "--set", "engine.threads=1000000"}),
                        {"engine.threads: must be between 0 and 1024", "cores"});
}

// One dataset and run file for the memory tests (hymotion_tiny, 16 samples).
class TrainMemory : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir("cli_memory");
    const CliResult synth = run_cli({zest_binary(), "data", "synth", "--model", "hymotion_tiny", "--out",
                                     (fs::path(dir_->path()) / "data").string(), "--samples", "16"});
    ASSERT_EQ(synth.code(), 0) << synth.describe();
    write_text(run_file(), "[model]\nname = \"hymotion_tiny\"\n[data]\ndir = \"" + dir_->sub("data") +
                               "\"\nbatch_size = 4\nseq_len = 12\nnum_workers = 0\n[engine]\nprecision = \"fp32\"\n"
                               "[train]\nmax_steps = 2\nrun_dir = \"" + dir_->sub("run") + "\"\n");
  }
  static void TearDownTestSuite() { delete dir_; }
  static std::string run_file() { return (fs::path(dir_->path()) / "run.toml").string(); }
  static CliResult train(const std::vector<std::string>& sets, long long address_limit) {
    std::vector<std::string> argv{zest_binary(), "train", run_file(), "--no-resume",
                                  "--set", "train.run_dir=\"" + dir_->sub("run_" + std::to_string(counter_++)) + "\""};
    for (const std::string& s : sets) argv.insert(argv.end(), {"--set", s});
    CliOptions options;
    options.timeout_s = 120;
    options.address_limit = address_limit;
    return run_cli(argv, options);
  }
  static inline TempDir* dir_ = nullptr;
  static inline int counter_ = 0;
};

// Under a 2 GB address-space limit (`ulimit -v`): a batch whose inputs cannot fit is refused before it is
// allocated (it segfaulted inside c10's backtrace before), with the largest value that fits.
TEST_F(TrainMemory, InputsThatCannotFitAreRefusedBeforeAllocating) {
  constexpr long long kLimit = 2'000'000'000;
  expect_one_line_error(train({"data.batch_size=2000000"}, kLimit),
                        {"data.batch_size = 2000000 does not fit", "(ulimit -v)", "at most data.batch_size = "});
  expect_one_line_error(train({"data.seq_len=100000000"}, kLimit),
                        {"data.seq_len = 100000000 does not fit", "one sample of inputs is 4.9 GB",
                         "at most data.seq_len = "});
}

// Activations that do not fit the 2 GB address space are refused before the first step by the activation
// estimate (train/activation_check.h), in one line naming what fits; an out-of-memory inside a step is
// tests/cli/test_step_failure.cpp's.
TEST_F(TrainMemory, ActivationsThatCannotFitAreRefusedBeforeTheFirstStep) {
  const CliResult r = train({"data.batch_size=20000"}, 2'000'000'000);
  expect_one_line_error(r, {"data.batch_size = 20000 needs about", "of activations per micro-batch",
                            "at most data.batch_size = "});
}

}  // namespace
}  // namespace zest::testing
