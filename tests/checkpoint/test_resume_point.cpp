// The resume decision of a multi-node run (tools/multi_node.h agreed_resume_point) on threads: with
// [checkpoint] shared_fs = false each node holds only its own ranks' files, so resuming a 4-rank checkpoint
// on 2 ranks is refused (naming both world sizes and the fix); on a shared folder it reshards; the
// world size is read through the manifest's own bounded reader.
#include "checkpoint/ckpt_test_util.h"
#include "checkpoint/thread_world.h"
#include "tools/multi_node.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace zest::testing
