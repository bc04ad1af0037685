// The resume decision of a multi-node run (train/multi_node.h agreed_resume_point) on threads: with
// [checkpoint] shared_fs = false each node holds only its own ranks' files, so resuming a 4-rank checkpoint
// on 2 ranks is refused (naming both world sizes and the fix); on a shared folder it reshards; the
// world size is read through the manifest's own bounded reader. And `zest merge --shard-size` sizes: whole
// bytes, at least a megabyte (below, every tensor would get a file of its own).
#include "checkpoint/ckpt_test_util.h"
#include "checkpoint/thread_world.h"
#include "cli/cli_test_util.h"
#include "train/multi_node.h"

#include <gtest/gtest.h>

#include <fstream>
#include <mutex>

namespace zest::testing {
namespace {

TEST(ResumePoint, OtherWorldSizeWithoutASharedFolderIsRefused) {
  const TempDir dir("resume_point");
  run_ranks(4, [&](int, std::shared_ptr<Communicator> comm) {
    ToyRun run = make_toy_run(comm, {});
    train_toy(run, 0, 2);
    checkpoint::save(*run.engine, toy_save_request(dir.path()));
  });
  {  // a `latest` holding a terminal escape sequence: ckpt inspect notes it escaped, never raw
    std::ofstream(dir.sub("latest")) << "\x1b]0;owned\x07\n";
    const CliResult r = run_cli({zest_binary(), "ckpt", "inspect", dir.path()});
    EXPECT_EQ(r.code(), 0) << r.describe();
    EXPECT_NE(r.err.find("names '\\x1b]0;owned\\x07', which is not a committed checkpoint"), std::string::npos)
        << r.describe();
    EXPECT_EQ((r.err + r.out).find('\x1b'), std::string::npos) << r.describe();
    std::ofstream(dir.sub("latest")) << "step_00000002\n";
  }
  RunConfig config;
  config.checkpoint.dir = dir.path();
  for (const bool shared : {false, true}) {
    config.checkpoint.shared_fs = shared;
    std::mutex guard;
    std::vector<std::string> results, errors;
    run_ranks(2, [&](int, std::shared_ptr<Communicator> comm) {
      try {
        const std::string chosen = agreed_resume_point(config, /*resume=*/true, *comm);
        const std::lock_guard<std::mutex> lock(guard);
        results.push_back(chosen);
      } catch (const Error& e) {
        const std::lock_guard<std::mutex> lock(guard);
        errors.push_back(e.what());
      }
    });
    if (shared) {
      EXPECT_TRUE(errors.empty()) << errors.front();
      ASSERT_EQ(results.size(), 2u);
      EXPECT_NE(results[0].find("step_"), std::string::npos) << results[0];
    } else {
      ASSERT_EQ(errors.size(), 2u) << "resuming 4 ranks' files on 2 ranks with shared_fs = false was accepted";
      EXPECT_NE(errors[0].find("(saved by 4 ranks) on 2 ranks"), std::string::npos) << errors[0];
      EXPECT_NE(errors[0].find("shared_fs = false"), std::string::npos) << errors[0];
    }
  }
}

TEST(ResumePoint, MergeShardSizesAreWholeBytesOfAtLeast64KiB) {
  EXPECT_EQ(checkpoint::parse_byte_size("1.5MB"), 1'500'000u);
  expect_error([] { checkpoint::parse_byte_size("0.5B"); }, {"size '0.5B' is not a whole number of bytes"});
  expect_error([] { checkpoint::parse_byte_size("1e30TB"); }, {"larger than any file can be"});
  expect_error([] { checkpoint::parse_byte_size("5\x1b[2JGB"); }, {"unknown unit '\\x1b[2JGB'"});
  const TempDir dir("shard_size");
  for (const std::string size : {"0.5KB", "10B", "1KiB", "65535B"}) {
    const CliResult r = run_cli({zest_binary(), "merge", dir.path(), "-o", dir.sub("m.safetensors"), "--shard-size", size});
    EXPECT_EQ(r.code(), 1) << r.describe();
    EXPECT_NE(r.err.find("zest merge --shard-size " + size), std::string::npos) << r.describe();
    EXPECT_NE(r.err.find("below 64 KiB nearly every tensor would get a file of its own"), std::string::npos) << r.describe();
  }
}

}  // namespace
}  // namespace zest::testing
