// The CLI front ends: `zest merge` and `zest ckpt inspect [--verify]` on a real checkpoint, named as its
// root, as DIR/latest (the file a user sees) or as a step folder; refusals exit 1 with one message;
// `zest merge --ema` and the EMA line of `zest ckpt inspect`.
// Skipped when the zest binary has not been built in this build tree.
#include "ckpt_test_util.h"
#include "thread_world.h"

#include "formats/safetensors.h"
#include "common/zest_cli_run.h"

#include <gtest/gtest.h>

#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>

namespace zest::testing {
namespace {

TEST(CheckpointCli, MergeAndInspect) {
  if (!std::filesystem::exists(std::string(ZEST_BINARY_DIR) + "/zest")) GTEST_SKIP() << "zest not built";
  TempDir dir;
  std::map<std::string, torch::Tensor> params;
  run_ranks(2, [&](int rank, std::shared_ptr<Communicator> comm) {
    ToyRun run = make_toy_run(comm, {2, false, 7});
    train_toy(run, 0, 3);
    checkpoint::save(*run.engine, toy_save_request(dir.sub("ckpt")));
    if (rank == 0) params = params_of(*run.model);
  });
  const ZestRun merged = run_zest("merge " + dir.sub("ckpt") + " -o " + dir.sub("m.safetensors") + " --dtype bf16",
                              dir.sub("merge.log"));
  ASSERT_EQ(merged.status, 0) << merged.output;
  EXPECT_NE(merged.output.find("14 tensors"), std::string::npos) << merged.output;
  const auto file = safetensors::load_file(dir.sub("m.safetensors"));
  ASSERT_EQ(file.size(), params.size());
  for (const auto& [name, t] : file) EXPECT_TRUE(torch::equal(t, params.at(name).to(torch::kBFloat16))) << name;

  const ZestRun inspect = run_zest("ckpt inspect " + dir.sub("ckpt") + " --verify", dir.sub("inspect.log"));
  EXPECT_EQ(inspect.status, 0) << inspect.output;
  for (const char* part : {"step_00000003", "world size   2, stage 2", "toynet", "rank_00001.safetensors",
                           "all verified", "adamw (3 updates)"})
    EXPECT_NE(inspect.output.find(part), std::string::npos) << part << " not in:\n" << inspect.output;

  const std::string rank1 = dir.sub("ckpt/step_00000003/rank_00001.safetensors");
  {
    std::fstream f(rank1, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-3, std::ios::end);
    f.put('\x55');
  }
  const ZestRun bad = run_zest("ckpt inspect " + dir.sub("ckpt") + " --verify", dir.sub("bad.log"));
  EXPECT_EQ(bad.status, 1) << bad.output;
  EXPECT_NE(bad.output.find("BAD: " + rank1 + ": xxh64 checksum"), std::string::npos) << bad.output;

  const ZestRun missing = run_zest("merge " + dir.sub("nothing") + " -o " + dir.sub("x.safetensors"), dir.sub("x.log"));
  EXPECT_EQ(missing.status, 1);
  EXPECT_NE(missing.output.find("no such checkpoint folder"), std::string::npos) << missing.output;
}

TEST(CheckpointCli, LatestFileAndStepFolderWorkAsTheRoot) {
  if (!std::filesystem::exists(std::string(ZEST_BINARY_DIR) + "/zest")) GTEST_SKIP() << "zest not built";
  TempDir dir;
  run_ranks(2, [&](int, std::shared_ptr<Communicator> comm) {
    ToyRun run = make_toy_run(comm, {2, false, 7});
    train_toy(run, 0, 3);
    checkpoint::save(*run.engine, toy_save_request(dir.sub("ckpt")));
  });
  // inspect and merge accept the same names (both go through locate_checkpoint): each is run on two.
  for (const std::string& name : {dir.sub("ckpt/latest"), dir.sub("ckpt/step_00000003")}) {
    const ZestRun inspect = run_zest("ckpt inspect " + name + " --verify", dir.sub("i.log"));
    EXPECT_EQ(inspect.status, 0) << name << ":\n" << inspect.output;
    const std::string shown = "checkpoint   " + dir.sub("ckpt/step_00000003");
    EXPECT_NE(inspect.output.find(shown), std::string::npos) << inspect.output;
    EXPECT_NE(inspect.output.find("all verified"), std::string::npos) << inspect.output;
  }
  for (const std::string& name : {dir.sub("ckpt/latest"), dir.sub("ckpt/step_00000003/manifest.json")}) {
    const ZestRun merge = run_zest("merge " + name + " -o " + dir.sub("m.safetensors"), dir.sub("m.log"));
    EXPECT_EQ(merge.status, 0) << name << ":\n" << merge.output;
    EXPECT_EQ(safetensors::load_file(dir.sub("m.safetensors")).size(), 14u);
    std::filesystem::remove(dir.sub("m.safetensors"));
  }
  // `latest` naming nothing: the newest committed checkpoint, with a note saying so.
  std::ofstream(dir.sub("ckpt/latest"), std::ios::trunc) << "step_00000099\n";
  const ZestRun dangling = run_zest("ckpt inspect " + dir.sub("ckpt/latest"), dir.sub("d.log"));
  EXPECT_EQ(dangling.status, 0) << dangling.output;
  EXPECT_NE(dangling.output.find("names 'step_00000099', which is not a committed checkpoint; using"),
            std::string::npos) << dangling.output;
}

TEST(CheckpointCli, MergeRefusalsExitOneWithOneMessage) {
  if (!std::filesystem::exists(std::string(ZEST_BINARY_DIR) + "/zest")) GTEST_SKIP() << "zest not built";
  TempDir dir;
  run_ranks(2, [&](int, std::shared_ptr<Communicator> comm) {
    ToyRun run = make_toy_run(comm, {2, false, 7});
    checkpoint::save(*run.engine, toy_save_request(dir.sub("ckpt")));
  });
  const std::string rank0 = dir.sub("ckpt/step_00000000/rank_00000.safetensors");
  const auto size = std::filesystem::file_size(rank0);
  const ZestRun inside = run_zest("merge " + dir.sub("ckpt") + " -o " + rank0, dir.sub("a.log"));
  EXPECT_EQ(inside.status, 1);
  EXPECT_NE(inside.output.find("zest: error: " + rank0 + ": is inside the checkpoint folder"), std::string::npos)
      << inside.output;
  EXPECT_EQ(std::filesystem::file_size(rank0), size);
  std::filesystem::create_directories(dir.sub("adir"));
  const ZestRun onto_dir = run_zest("merge " + dir.sub("ckpt") + " -o " + dir.sub("adir"), dir.sub("b.log"));
  EXPECT_EQ(onto_dir.status, 1);
  EXPECT_NE(onto_dir.output.find("the merge output would replace a folder"), std::string::npos) << onto_dir.output;
  EXPECT_FALSE(std::filesystem::exists(dir.sub("adir.tmp")));
  for (const ZestRun& ran : {inside, onto_dir})  // one line: no stack trace, no second message
    EXPECT_EQ(std::count(ran.output.begin(), ran.output.end(), '\n'), 1) << ran.output;
}

// `merge --ema` writes the EMA (not the trained weights); inspect shows the EMA's settings; a checkpoint
// without an EMA is refused in one line, with nothing written.
TEST(CheckpointCli, MergeEmaAndInspectShowTheEma) {
  if (!std::filesystem::exists(std::string(ZEST_BINARY_DIR) + "/zest")) GTEST_SKIP() << "zest not built";
  TempDir dir;
  std::map<std::string, torch::Tensor> ema;
  run_ranks(2, [&](int rank, std::shared_ptr<Communicator> comm) {
    ToyRun with = make_toy_run(comm, {2, false, 7, /*ema=*/true});
    train_toy(with, 0, 5);
    checkpoint::save(*with.engine, toy_save_request(dir.sub("with")));
    const auto gathered = ema_by_name(*with.engine);
    if (rank == 0) ema = gathered;
    ToyRun without = make_toy_run(comm, {2, false, 7});
    checkpoint::save(*without.engine, toy_save_request(dir.sub("without")));
  });
  const ZestRun merged = run_zest("merge " + dir.sub("with") + " --ema -o " + dir.sub("ema.safetensors"), dir.sub("m.log"));
  ASSERT_EQ(merged.status, 0) << merged.output;
  EXPECT_NE(merged.output.find("14 tensors (EMA weights)"), std::string::npos) << merged.output;
  const auto file = safetensors::load_file(dir.sub("ema.safetensors"));
  ASSERT_EQ(file.size(), ema.size());
  for (const auto& [name, t] : file) EXPECT_TRUE(torch::equal(t, ema.at(name))) << name;

  const ZestRun inspect = run_zest("ckpt inspect " + dir.sub("with"), dir.sub("i.log"));
  EXPECT_EQ(inspect.status, 0) << inspect.output;
  for (const char* part :
       {"exp_avg_sq, ema\n", "ema          decay 0.9 (min 0), update_every 2, start_step 1, warm-up"})
    EXPECT_NE(inspect.output.find(part), std::string::npos) << part << " not in:\n" << inspect.output;
  const ZestRun plain = run_zest("ckpt inspect " + dir.sub("without"), dir.sub("p.log"));
  EXPECT_NE(plain.output.find("ema          none"), std::string::npos) << plain.output;

  const ZestRun refused =
      run_zest("merge " + dir.sub("without") + " --ema -o " + dir.sub("no.safetensors"), dir.sub("n.log"));
  EXPECT_EQ(refused.status, 1);
  EXPECT_NE(refused.output.find("zest: error: " + dir.sub("without/step_00000000") +
                                ": this checkpoint has no EMA of the weights"),
            std::string::npos) << refused.output;
  EXPECT_EQ(std::count(refused.output.begin(), refused.output.end(), '\n'), 1) << refused.output;
  EXPECT_FALSE(std::filesystem::exists(dir.sub("no.safetensors")));
}

}  // namespace
}  // namespace zest::testing
