// The CLI front ends: `zest merge` and `zest ckpt inspect [--verify]` on a real checkpoint (skipped when
// the zest binary has not been built in this build tree).
#include "ckpt_test_util.h"
#include "thread_world.h"

#include "checkpoint/safetensors.h"

#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cstdlib>
#include <fstream>

namespace zest::testing {
namespace {

struct Ran {
  int status = -1;
  std::string output;
};

Ran run_zest(const std::string& args, const std::string& log) {
  const std::string command = std::string(ZEST_BINARY_DIR) + "/zest " + args + " > " + log + " 2>&1";
  Ran ran;
  const int rc = std::system(command.c_str());
  ran.status = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  std::ifstream in(log);
  ran.output.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return ran;
}

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
  const Ran merged = run_zest("merge " + dir.sub("ckpt") + " -o " + dir.sub("m.safetensors") + " --dtype bf16",
                              dir.sub("merge.log"));
  ASSERT_EQ(merged.status, 0) << merged.output;
  EXPECT_NE(merged.output.find("14 tensors"), std::string::npos) << merged.output;
  const auto file = safetensors::load_file(dir.sub("m.safetensors"));
  ASSERT_EQ(file.size(), params.size());
  for (const auto& [name, t] : file) EXPECT_TRUE(torch::equal(t, params.at(name).to(torch::kBFloat16))) << name;

  const Ran inspect = run_zest("ckpt inspect " + dir.sub("ckpt") + " --verify", dir.sub("inspect.log"));
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
  const Ran bad = run_zest("ckpt inspect " + dir.sub("ckpt") + " --verify", dir.sub("bad.log"));
  EXPECT_EQ(bad.status, 1) << bad.output;
  EXPECT_NE(bad.output.find("BAD: " + rank1 + ": xxh64 checksum"), std::string::npos) << bad.output;

  const Ran missing = run_zest("merge " + dir.sub("nothing") + " -o " + dir.sub("x.safetensors"), dir.sub("x.log"));
  EXPECT_EQ(missing.status, 1);
  EXPECT_NE(missing.output.find("no such checkpoint folder"), std::string::npos) << missing.output;
}

}  // namespace
}  // namespace zest::testing
