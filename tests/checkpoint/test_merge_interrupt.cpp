// SIGINT/SIGTERM during `zest merge`: the merge stops at the next piece, removes NAME.tmp (and the
// per-shard .tmp files of --shard-size), replaces nothing, says so and exits 1. In process (the flag
// raised before the merge, so the stop is deterministic) and through the binary (a signal at a random
// moment: the merge either completes or stops cleanly, never 143 with leftovers).
#include "ckpt_test_util.h"
#include "thread_world.h"

#include "checkpoint/merge.h"
#include "formats/safetensors.h"
#include "core/interrupt.h"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <thread>

namespace zest::testing {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> top_level_tmp_files(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.path().string().ends_with(".tmp")) out.push_back(entry.path().string());
  return out;
}

void save_toy_checkpoint(const std::string& root) {
  run_ranks(2, [&](int, std::shared_ptr<Communicator> comm) {
    ToyRun run = make_toy_run(comm, {2, false, 7});
    train_toy(run, 0, 2);
    checkpoint::save(*run.engine, toy_save_request(root));
  });
}

TEST(MergeInterrupt, StopSignalRemovesTemporaryFilesAndReplacesNothing) {
  TempDir dir;
  save_toy_checkpoint(dir.sub("ckpt"));
  fs::create_directories(dir.sub("out"));
  std::ofstream(dir.sub("out/model.safetensors")) << "the previous merge";
  for (const uint64_t shard_size : {uint64_t{0}, uint64_t{64}}) {
    const InterruptGuard guard;
    ::raise(SIGTERM);  // arrives before the first piece is written
    checkpoint::MergeOptions options;
    options.shard_size_bytes = shard_size;
    expect_error([&] { checkpoint::merge_offline(dir.sub("ckpt"), dir.sub("out/model.safetensors"), options); },
                 {"stopped by SIGTERM while merging into", "temporary files were removed and nothing was replaced"});
    EXPECT_EQ(top_level_tmp_files(dir.sub("out")), std::vector<std::string>{}) << "shard size " << shard_size;
    std::ifstream in(dir.sub("out/model.safetensors"));
    EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "the previous merge");
    EXPECT_FALSE(fs::exists(dir.sub("out/model.safetensors.index.json")));
  }
  reset_interrupt();
}

TEST(MergeInterrupt, SignalToTheBinaryStopsCleanlyOrCompletes) {
  const std::string zest = std::string(ZEST_BINARY_DIR) + "/zest";
  if (!fs::exists(zest)) GTEST_SKIP() << "zest not built";
  TempDir dir;
  save_toy_checkpoint(dir.sub("ckpt"));
  for (const int delay_ms : {0, 5, 20, 60}) {
    const std::string out = dir.sub("out" + std::to_string(delay_ms));
    fs::create_directories(out);
    const std::string log = out + "/log";
    const pid_t pid = ::fork();
    if (pid == 0) {
      const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      ::execl(zest.c_str(), zest.c_str(), "merge", dir.sub("ckpt").c_str(), "-o", (out + "/m.safetensors").c_str(),
              "--shard-size", "64", static_cast<char*>(nullptr));
      ::_exit(127);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    ::kill(pid, SIGTERM);
    int status = 0;
    ::waitpid(pid, &status, 0);
    std::ifstream in(log);
    const std::string text(std::istreambuf_iterator<char>(in), {});
    EXPECT_EQ(top_level_tmp_files(out), std::vector<std::string>{}) << text;
    if (WIFSIGNALED(status)) continue;  // killed before the guard was installed: nothing was written yet
    ASSERT_TRUE(WIFEXITED(status)) << text;
    if (WEXITSTATUS(status) == 0) {
      EXPECT_TRUE(fs::exists(out + "/m.safetensors.index.json")) << text;
    } else {
      EXPECT_EQ(WEXITSTATUS(status), 1) << text;
      EXPECT_NE(text.find("zest: error: stopped by SIGTERM"), std::string::npos) << text;
      EXPECT_FALSE(fs::exists(out + "/m.safetensors.index.json")) << text;
    }
  }
}

}  // namespace
}  // namespace zest::testing
