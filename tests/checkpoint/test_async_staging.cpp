// Asynchronous saves copy the rank's shard into one host staging buffer, allocated once at the shard's
// size and reused by every later save (the host's memory does not grow per save); the save reports how
// long its caller stood still, and a save due while the previous one is still writing waits for it and
// says so. Each save holds the state of its own step (the staging is not overwritten under a write).
#include "checkpoint/load.h"
#include "checkpoint/save.h"
#include "checkpoint/save_phase.h"
#include "checkpoint/ckpt_test_util.h"
#include "comm/self_communicator.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

namespace zest::testing {
namespace {

// Slows every rank-file write down, so that the next save is due while one is still writing.
void slow_writer(checkpoint::SavePhase phase, int, int64_t) {
  if (phase == checkpoint::SavePhase::rank_file_partial) std::this_thread::sleep_for(std::chrono::milliseconds(300));
}

TEST(AsyncStaging, OneBufferReusedAndAStillWritingSaveIsWaitedFor) {
  TempDir dir("async_staging");
  auto comm = std::make_shared<SelfCommunicator>();
  ToyRun run = make_toy_run(comm, RunSpec{});
  checkpoint::Saver saver;
  auto request = toy_save_request(dir.sub("ckpt"));
  request.async = true;
  saver.reserve_staging(*run.engine);
  const int64_t shard_bytes = run.engine->master_shard().numel() * 4 * 3;  // master + AdamW's two moments
  EXPECT_EQ(saver.staging_bytes(), shard_bytes);

  train_toy(run, 0, 2);
  const auto at_2 = engine_state(*run.engine);
  saver.save(*run.engine, request);
  EXPECT_EQ(saver.last_save().staging_bytes, shard_bytes);
  EXPECT_FALSE(saver.last_save().waited_for_previous);
  EXPECT_GE(saver.last_save().stall_ms, 0.0);
  saver.wait(*comm);

  checkpoint::set_save_phase_hook(&slow_writer);
  train_toy(run, 2, 4);
  const auto at_4 = engine_state(*run.engine);
  saver.save(*run.engine, request);  // writes for 300 ms
  train_toy(run, 4, 5);              // training goes on meanwhile: the staging holds step 4's state
  saver.save(*run.engine, request);  // due while step 4 is still writing
  const checkpoint::SaveFigures waited = saver.last_save();
  saver.wait(*comm);
  checkpoint::set_save_phase_hook(nullptr);
  EXPECT_TRUE(waited.waited_for_previous);
  EXPECT_EQ(waited.previous_step, 4);
  EXPECT_GT(waited.waited_ms, 100.0);
  EXPECT_GE(waited.stall_ms, waited.waited_ms);
  EXPECT_EQ(saver.staging_bytes(), shard_bytes);  // still the one buffer

  for (const auto& [step, expected] : {std::pair{2, at_2}, std::pair{4, at_4}}) {
    ToyRun fresh = make_toy_run(comm, RunSpec{});
    checkpoint::load(*fresh.engine, toy_load_request(dir.sub("ckpt") + "/" + checkpoint::step_dir_name(step)));
    expect_bitwise_equal(engine_state(*fresh.engine), expected, "step " + std::to_string(step));
  }
}

}  // namespace
}  // namespace zest::testing
