// `zest train` never loses or silently replaces data: ranks whose launcher was killed save and exit
// cleanly, --no-resume refuses another run's checkpoints, a finished run is not saved again, unusable
// folders and full disks are errors at once, a 1-rank checkpoint resumes on 2 ranks past half an epoch,
// and a logged loss is the mean over the steps since the previous log line (weights unchanged).
#include "formats/safetensors.h"
#include "cli/cli_test_util.h"
#include "common/temp_dir.h"
#include "launch_test_util.h"
#include "tensorboard/event_file_reader.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <sys/prctl.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <thread>

namespace zest::testing {
namespace {

namespace fs = std::filesystem;

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<nlohmann::json> metrics(const fs::path& run_dir) {
  std::vector<nlohmann::json> out;
  std::ifstream in(run_dir / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

nlohmann::json manifest_extra(const fs::path& checkpoints) {
  const std::string latest = read_text(checkpoints / "latest");
  const fs::path step_dir = checkpoints / latest.substr(0, latest.find('\n'));
  nlohmann::json extra = nlohmann::json::parse(read_text(step_dir / "manifest.json")).at("extra");
  if (extra.contains("data")) extra["data"].erase("dataset_fingerprint");  // compared by test_run_lock.cpp
  return extra;
}

// One small dataset (hymotion_tiny, 24 samples) and run files over it, per test suite.
class RunSafety : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir("run_safety");
    const CliResult synth = run_cli({zest_binary(), "data", "synth", "--model", "hymotion_tiny", "--out", dir_->sub("data"),
                                     "--samples", "24"});
    ASSERT_EQ(synth.code(), 0) << synth.describe();
  }
  static void TearDownTestSuite() { delete dir_; }

  // A run file in its own folder: batch 4, fp32, the given [train]/[checkpoint] lines.
  static fs::path run_file(const std::string& name, const std::string& extra) {
    const fs::path folder = fs::path(dir_->path()) / name;
    fs::create_directories(folder);
    std::ofstream(folder / "run.toml") << "[model]\nname = \"hymotion_tiny\"\n[data]\ndir = \"" << dir_->sub("data")
                                       << "\"\nbatch_size = 4\nseq_len = 12\nnum_workers = 1\n"
                                       << "[engine]\nprecision = \"fp32\"\n[optimizer]\nlr = 3e-3\n"
                                       << "[train]\nrun_dir = \"" << (folder / "run").string() << "\"\n" << extra;
    return folder / "run.toml";
  }
  static CliResult train(const fs::path& run, std::vector<std::string> args = {}, CliOptions options = {}) {
    std::vector<std::string> argv{zest_binary(), "train", run.string()};
    argv.insert(argv.end(), args.begin(), args.end());
    return run_cli(argv, options);
  }
  static inline TempDir* dir_ = nullptr;
};

std::vector<pid_t> children_of(pid_t parent) {
  std::vector<pid_t> out;
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string stat = read_text(entry.path() / "stat");
    const size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream fields(stat.substr(close + 2));
    char state = 0;
    pid_t ppid = 0;
    fields >> state >> ppid;
    if (ppid == parent) out.push_back(static_cast<pid_t>(std::stol(entry.path().filename().string())));
  }
  return out;
}

// Waits (60 s at most) for an orphan reparented to us; its wait status, or nullopt after killing it.
std::optional<int> wait_orphan(pid_t pid) {
  int status = 0;
  for (int waited_ms = 0; waited_ms < 60000; waited_ms += 50) {
    if (::waitpid(pid, &status, WNOHANG) == pid) return status;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, &status, 0);
  return std::nullopt;
}

// Starts 2 ranks of `rank_command` under `zest launch`, lets them train 3 steps, runs `kill_launcher`,
// and expects every `zest train` process to exit 0 with its stop checkpoint written. `wrapped`: each
// rank is a shell running zest train (the launcher's direct children are the shells).
void expect_clean_stop_after_launcher_death(const fs::path& run, bool wrapped,
                                            const std::function<void(Child&)>& kill_launcher) {
  std::vector<std::string> argv{zest_binary(), "launch", "-n", "2", "--"};
  if (wrapped) {
    argv.insert(argv.end(), {"/bin/sh", "-c", zest_binary() + " train " + run.string() + "; echo shell-done"});
  } else {
    argv.insert(argv.end(), {zest_binary(), "train", run.string()});
  }
  ASSERT_EQ(::prctl(PR_SET_CHILD_SUBREAPER, 1), 0);  // orphaned ranks become our children: their status is ours
  Child launcher(argv, {"ZEST_COMM_TIMEOUT_S=30"});
  ASSERT_TRUE(launcher.read_until("[rank 0] step 3/")) << launcher.output();
  std::vector<pid_t> direct = children_of(launcher.pid()), trainers = direct;
  ASSERT_EQ(direct.size(), 2u) << "could not find the ranks of launcher " << launcher.pid();
  if (wrapped) {
    trainers.clear();
    for (const pid_t shell : direct)
      for (const pid_t child : children_of(shell)) trainers.push_back(child);
    ASSERT_EQ(trainers.size(), 2u) << "could not find zest train under the shells";
  }
  kill_launcher(launcher);
  launcher.finish();
  for (const pid_t trainer : trainers) {
    const std::optional<int> status = wait_orphan(trainer);
    ASSERT_TRUE(status.has_value()) << "zest train " << trainer << " did not exit within 60 s of the launcher's death";
    EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0)
        << "zest train " << trainer
        << (WIFSIGNALED(*status) ? " killed by signal " + std::to_string(WTERMSIG(*status))
                                 : " exit " + std::to_string(WEXITSTATUS(*status)));
  }
  if (wrapped)
    for (const pid_t shell : direct) wait_orphan(shell);
  ::prctl(PR_SET_CHILD_SUBREAPER, 0);
  const fs::path checkpoints = run.parent_path() / "run/checkpoints";
  ASSERT_TRUE(fs::exists(checkpoints / "latest")) << "the ranks exited without their stop checkpoint";
  const auto data = manifest_extra(checkpoints).at("data");
  EXPECT_GE(data.at("consumed").get<int64_t>() + 24 * data.at("epoch").get<int64_t>(), 3 * 8);  // 3+ steps of 8
  EXPECT_FALSE(fs::exists(run.parent_path() / "run/model.safetensors"));  // a stop, not the end of the run
}

// kill -9 of `zest launch`: each rank takes the launcher's death as a stop, finishes its step, saves and
// exits 0, although nobody reads its output any more (a write to the dead pipe killed it by SIGPIPE).
// The ranks here are shells around zest train: zest train sees its own parent die. (Ranks that are
// zest train themselves get the launcher's death directly: the next test.)
TEST_F(RunSafety, RanksOfAKilledLauncherSaveAndExitCleanly) {
  const std::string train = "max_steps = 100000\nlog_every = 1\n[checkpoint]\nevery_steps = 0\n";
  expect_clean_stop_after_launcher_death(run_file("orphans_wrapped", train), true,
                                         [](Child& launcher) { ::kill(launcher.pid(), SIGKILL); });
}

// A scheduler's SIGTERM (forwarded by the launcher) followed by its SIGKILL: the launcher's death must
// not count as the second stop signal that aborts a rank in the middle of its save.
TEST_F(RunSafety, LauncherKilledAfterForwardingAStopDoesNotAbortTheSave) {
  const std::string train = "max_steps = 100000\nlog_every = 1\n[checkpoint]\nevery_steps = 0\n";
  expect_clean_stop_after_launcher_death(run_file("term_then_kill", train), false, [](Child& launcher) {
    ::kill(launcher.pid(), SIGTERM);
    ASSERT_TRUE(launcher.read_until("forwarding it to the ranks")) << launcher.output();
    ::kill(launcher.pid(), SIGKILL);
  });
}

// --no-resume into a folder with another run's checkpoints is refused before anything is written;
// re-running a complete run trains nothing and saves nothing.
TEST_F(RunSafety, RerunsNeverReplaceCheckpoints) {
  const fs::path run = run_file("rerun", "max_steps = 2\nlog_every = 1\n[checkpoint]\nevery_steps = 1\nkeep_last = 0\n");
  const fs::path out = run.parent_path() / "run";
  const CliResult first = train(run);
  ASSERT_EQ(first.code(), 0) << first.describe();
  const std::string config_before = read_text(out / "config.toml");
  const auto saved_at = fs::last_write_time(out / "checkpoints/step_00000002/manifest.json");
  const auto merged_at = fs::last_write_time(out / "model.safetensors");

  const CliResult fresh = train(run, {"--no-resume", "--set", "train.seed=9"});
  EXPECT_EQ(fresh.code(), 1) << fresh.describe();
  EXPECT_EQ(one_clear_error_line(fresh.err), "") << fresh.describe();
  EXPECT_NE(fresh.err.find("--no-resume: checkpoint.dir '" + (out / "checkpoints").string() + "' already holds 2 "
                           "checkpoint(s)"), std::string::npos) << fresh.describe();
  EXPECT_EQ(fresh.out.find("step 1/"), std::string::npos) << "trained before refusing";
  EXPECT_EQ(read_text(out / "config.toml"), config_before) << "the refused run replaced config.toml";
  EXPECT_EQ(read_text(out / "checkpoints/latest"), "step_00000002\n");

  const CliResult again = train(run);
  ASSERT_EQ(again.code(), 0) << again.describe();
  EXPECT_NE(again.out.find("the run is complete: its checkpoint is at step 2"), std::string::npos) << again.describe();
  EXPECT_EQ(again.out.find("checkpoint " + out.string()), std::string::npos) << "saved again:\n" << again.out;
  EXPECT_EQ(fs::last_write_time(out / "checkpoints/step_00000002/manifest.json"), saved_at);
  EXPECT_EQ(fs::last_write_time(out / "model.safetensors"), merged_at) << "merged again";
  EXPECT_EQ(metrics(out).size(), 2u);
}

// A checkpoint folder that cannot be used is found before the first step, not at the first save.
TEST_F(RunSafety, UnusableCheckpointFolderFailsAtStart) {
  const fs::path run = run_file("badckpt", "max_steps = 50\n");
  std::ofstream(run.parent_path() / "plain_file") << "not a folder";
  for (const auto& [dir, message] : std::vector<std::pair<std::string, std::string>>{
           {(run.parent_path() / "plain_file").string(), "exists and is not a folder"},
           {(run.parent_path() / "plain_file/ckpt").string(), "cannot create checkpoint.dir"}}) {
    const CliResult r = train(run, {"--set", "checkpoint.dir=\"" + dir + "\""});
    EXPECT_EQ(r.code(), 1) << r.describe();
    EXPECT_EQ(one_clear_error_line(r.err), "") << r.describe();
    EXPECT_NE(r.err.find(message), std::string::npos) << r.describe();
    EXPECT_EQ(r.out.find("step 1/"), std::string::npos) << r.describe();
  }
}

// Every write failure ends the run with an error: the progress output, config.toml, metrics.jsonl, the
// TensorBoard event file.
TEST_F(RunSafety, FullDiskIsAnError) {
  const fs::path run = run_file("fulldisk", "max_steps = 40\nlog_every = 1\n[checkpoint]\nevery_steps = 0\n");
  const fs::path out = run.parent_path() / "run";
  CliOptions to_full;
  to_full.stdout_path = "/dev/full";
  const CliResult progress = train(run, {}, to_full);
  EXPECT_EQ(progress.code(), 1) << progress.describe();
  EXPECT_EQ(one_clear_error_line(progress.err), "") << progress.describe();
  EXPECT_NE(progress.err.find("cannot write the progress output (stdout): No space left on device"), std::string::npos)
      << progress.describe();

  const auto config_size = static_cast<long long>(fs::file_size(out / "config.toml"));
  fs::remove_all(out);
  CliOptions small;
  small.file_size_limit = config_size - 1;  // the probe file fits, config.toml does not
  const CliResult config = train(run, {}, small);
  EXPECT_EQ(config.code(), 1) << config.describe();
  EXPECT_NE(config.err.find("cannot write " + (out / "config.toml").string() + ": File too large"), std::string::npos)
      << config.describe();
  EXPECT_FALSE(fs::exists(out / "config.toml"));

  fs::remove_all(out);
  small.file_size_limit = config_size + 700;  // config.toml fits, two metrics lines do too
  const CliResult lines = train(run, {"--set", "log.tensorboard=false"}, small);
  EXPECT_EQ(lines.code(), 1) << lines.describe();
  EXPECT_EQ(one_clear_error_line(lines.err), "") << lines.describe();
  EXPECT_NE(lines.err.find("cannot write " + (out / "metrics.jsonl").string() + ": File too large"), std::string::npos)
      << lines.describe();
  const std::string text = read_text(out / "metrics.jsonl");
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(text.back(), '\n') << "metrics.jsonl ends in half a line";
  EXPECT_GE(metrics(out).size(), 1u);

  // The TensorBoard file (larger than metrics.jsonl: it also holds the config) is where the same limit
  // strikes first: the error names it, and the record that did not fit was cut off again.
  fs::remove_all(out);
  const CliResult events = train(run, {}, small);
  EXPECT_EQ(events.code(), 1) << events.describe();
  EXPECT_EQ(one_clear_error_line(events.err), "") << events.describe();
  EXPECT_NE(events.err.find("cannot write " + (out / "tensorboard" / "events.out.tfevents.").string()), std::string::npos)
      << events.describe();
  EXPECT_NE(events.err.find(": File too large (set [log] tensorboard = false"), std::string::npos) << events.describe();
  for (const auto& entry : fs::directory_iterator(out / "tensorboard"))
    EXPECT_NO_THROW(tb::read_tfrecords(entry.path().string())) << "half a record at the end of " << entry.path();
}

// 1 rank reads 16 of the 24 samples (past half an epoch of 2 ranks, which failed before), then 2 ranks
// continue from the same global position: 8 each, then 8 more, which ends 1 sample into epoch 1.
TEST_F(RunSafety, OneRankCheckpointResumesOnTwoRanksPastHalfAnEpoch) {
  const fs::path run = run_file("reshard", "max_steps = 4\n[checkpoint]\nevery_steps = 4\nmerge_at_end = false\n");
  const CliResult one = train(run);
  ASSERT_EQ(one.code(), 0) << one.describe();
  const fs::path checkpoints = run.parent_path() / "run/checkpoints";
  EXPECT_EQ(manifest_extra(checkpoints).at("data"),
            (nlohmann::json{{"epoch", 0}, {"consumed", 16}, {"dataset_size", 24}}));
  Child two({zest_binary(), "launch", "-n", "2", "--", zest_binary(), "train", run.string(), "--set", "train.max_steps=6"});
  const int status = two.finish();
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << two.output();
  EXPECT_NE(two.output().find("at step 4 (saved by 1 ranks)"), std::string::npos) << two.output();
  // 2 ranks at index 8 of 12, 2 steps of 4 samples each: index 16 → epoch 1, index 4, i.e. 8 positions.
  EXPECT_EQ(manifest_extra(checkpoints).at("data"), (nlohmann::json{{"epoch", 1}, {"consumed", 8}, {"dataset_size", 24}}));
}

// The loss is read on logged steps only: a record's loss is the mean over the steps since the previous
// record, which also comes on checkpoint steps and the last step. The weights do not depend on it.
TEST_F(RunSafety, LoggedLossIsTheMeanSinceThePreviousRecord) {
  const fs::path every = run_file("log1", "max_steps = 5\nlog_every = 1\n[checkpoint]\nevery_steps = 0\n");
  const fs::path sparse = run_file("log3", "max_steps = 5\nlog_every = 3\n[checkpoint]\nevery_steps = 4\n");
  const CliResult a = train(every), b = train(sparse);
  ASSERT_EQ(a.code(), 0) << a.describe();
  ASSERT_EQ(b.code(), 0) << b.describe();
  const auto all = metrics(every.parent_path() / "run"), logged = metrics(sparse.parent_path() / "run");
  ASSERT_EQ(all.size(), 5u);
  ASSERT_EQ(logged.size(), 3u);  // step 3 (log), 4 (checkpoint), 5 (last)
  const std::vector<std::pair<int, int>> windows = {{1, 3}, {4, 4}, {5, 5}};
  for (size_t i = 0; i < windows.size(); ++i) {
    const auto [first, last] = windows[i];
    double sum = 0.0;
    for (int s = first; s <= last; ++s) sum += all[static_cast<size_t>(s - 1)].at("loss").get<double>();
    EXPECT_EQ(logged[i].at("step").get<int>(), last);
    EXPECT_EQ(logged[i].at("steps").get<int>(), last - first + 1);
    EXPECT_NEAR(logged[i].at("loss").get<double>(), sum / (last - first + 1), 1e-9) << "record " << i;
  }
  const auto wa = safetensors::load_file((every.parent_path() / "run/model.safetensors").string());
  const auto wb = safetensors::load_file((sparse.parent_path() / "run/model.safetensors").string());
  ASSERT_EQ(wa.size(), wb.size());
  for (size_t i = 0; i < wa.size(); ++i) EXPECT_TRUE(wa[i].second.equal(wb[i].second)) << wa[i].first;
}

}  // namespace
}  // namespace zest::testing
