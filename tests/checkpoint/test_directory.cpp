// The folder protocol (names, latest, retention, leftovers of interrupted saves, re-saving a step), the
// manifest's round trip and contents, config differences and size parsing.
#include "ckpt_test_util.h"
#include "thread_world.h"

#include "checkpoint/config_diff.h"
#include "formats/safetensors.h"

#include <gtest/gtest.h>

#include <fstream>

namespace zest::testing {
namespace {
namespace fs = std::filesystem;

std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

TEST(CheckpointDirectory, Names) {
  EXPECT_EQ(checkpoint::step_dir_name(1000), "step_00001000");
  EXPECT_EQ(checkpoint::rank_file_name(3), "rank_00003.safetensors");
  EXPECT_EQ(checkpoint::parse_step_dir_name("step_00001000"), 1000);
  EXPECT_FALSE(checkpoint::parse_step_dir_name("step_00001000.tmp"));
  EXPECT_FALSE(checkpoint::parse_step_dir_name("step_"));
  EXPECT_FALSE(checkpoint::parse_step_dir_name("latest"));
}

TEST(CheckpointDirectory, RetentionKeepsTheNewestAndCleansLeftovers) {
  TempDir dir;
  run_ranks(2, [&](int, std::shared_ptr<Communicator> comm) {
    ToyRun run = make_toy_run(comm, {1, false, 7});
    auto request = toy_save_request(dir.path());
    request.keep_last = 2;
    for (int64_t step = 0; step < 5; ++step) {
      train_toy(run, step, step + 1);
      if (comm->rank() == 0 && step == 3) fs::create_directories(dir.sub("step_00000009.tmp/junk"));
      comm->barrier();
      checkpoint::save(*run.engine, request);
    }
  });
  EXPECT_EQ(entries(dir.path()), (std::vector<std::string>{"latest", "step_00000004", "step_00000005"}));
  std::ifstream latest(dir.sub("latest"));
  std::string name;
  std::getline(latest, name);
  EXPECT_EQ(name, "step_00000005");
  EXPECT_EQ(checkpoint::find_latest(dir.path()), dir.sub("step_00000005"));
  EXPECT_EQ(entries(dir.sub("step_00000005")),
            (std::vector<std::string>{"manifest.json", "rank_00000.safetensors", "rank_00001.safetensors"}));
}

TEST(CheckpointDirectory, FindLatestFallsBackWhenLatestIsMissingOrDangling) {
  TempDir dir;
  EXPECT_FALSE(checkpoint::find_latest(dir.path()));
  run_ranks(1, [&](int, std::shared_ptr<Communicator> comm) {
    ToyRun run = make_toy_run(comm, {0, false, 7});
    for (int64_t step : {3, 8}) {
      auto request = toy_save_request(dir.path());
      request.step = step;
      checkpoint::save(*run.engine, request);
    }
  });
  EXPECT_EQ(checkpoint::find_latest(dir.path()), dir.sub("step_00000008"));
  std::ofstream(dir.sub("latest"), std::ios::trunc) << "step_00000003\n";  // latest is authoritative
  EXPECT_EQ(checkpoint::find_latest(dir.path()), dir.sub("step_00000003"));
  std::ofstream(dir.sub("latest"), std::ios::trunc) << "step_00000042\n";  // dangling
  EXPECT_EQ(checkpoint::find_latest(dir.path()), dir.sub("step_00000008"));
  fs::remove(dir.sub("latest"));
  EXPECT_EQ(checkpoint::find_latest(dir.path()), dir.sub("step_00000008"));
  EXPECT_EQ(checkpoint::resolve_checkpoint(dir.sub("step_00000003")), dir.sub("step_00000003"));
}

TEST(CheckpointDirectory, SavingAnExistingStepReplacesIt) {
  TempDir dir;
  run_ranks(2, [&](int, std::shared_ptr<Communicator> comm) {
    ToyRun run = make_toy_run(comm, {2, false, 7});
    auto request = toy_save_request(dir.path());
    request.step = 4;
    checkpoint::save(*run.engine, request);
    train_toy(run, 0, 2);
    checkpoint::save(*run.engine, request);
    ToyRun other = make_toy_run(comm, {2, false, 99});
    checkpoint::load(*other.engine, toy_load_request(dir.path()));
    EXPECT_TRUE(torch::equal(other.engine->master_shard(), run.engine->master_shard()));
  });
  EXPECT_EQ(entries(dir.path()), (std::vector<std::string>{"latest", "step_00000004"}));
}

TEST(CheckpointManifest, DescribesTheRunAndRoundTrips) {
  TempDir dir;
  run_ranks(2, [&](int, std::shared_ptr<Communicator> comm) {
    ToyRun run = make_toy_run(comm, {2, false, 7});
    train_toy(run, 0, 4);
    auto request = toy_save_request(dir.path());
    request.extra_json = R"({"data": {"position": 48}})";
    checkpoint::save(*run.engine, request);
  });
  const std::string step_dir = dir.sub("step_00000004");
  const checkpoint::Manifest m = checkpoint::read_manifest(step_dir);
  EXPECT_EQ(m.step, 4);
  EXPECT_EQ(m.world_size, 2);
  EXPECT_EQ(m.stage, 2);
  EXPECT_EQ(m.precision, "fp32");
  EXPECT_EQ(m.model_name, kModelName);
  EXPECT_EQ(m.config_hash, checkpoint::config_hash(kModelName, kModelConfig));
  EXPECT_EQ(m.kinds, (std::vector<std::string>{"master", "exp_avg", "exp_avg_sq"}));
  EXPECT_EQ(m.optimizer_step, 4);
  EXPECT_EQ(m.scheduler.warmup_steps, 3);
  EXPECT_GT(m.lr, 0.0);
  ASSERT_EQ(m.units.size(), 4u);
  EXPECT_EQ(m.units[0].name, "embed");
  EXPECT_EQ(m.units[0].slots[0].name, "embed.weight");
  EXPECT_EQ(m.units[0].slots[0].aliases, std::vector<std::string>{"head_extra.tied"});
  EXPECT_EQ(m.units[0].slots[0].shape, (std::vector<int64_t>{13, 7}));
  EXPECT_EQ(m.units[0].padded_numel % (2 * kPadMultiple), 0);
  EXPECT_EQ(m.num_parameters(), 7 * 13 + 13 + 2 * (13 * 13 + 13 + 13 + 13) + 13 * 5 + 5 + 9);
  EXPECT_EQ(m.extra_json, R"({"data":{"position":48}})");
  ASSERT_EQ(m.files.size(), 2u);
  for (const auto& f : m.files) EXPECT_EQ(f.bytes, fs::file_size(step_dir + "/" + f.name));
  // Each rank file is a plain safetensors file with one tensor per kind and unit.
  const safetensors::Reader shard(step_dir + "/rank_00001.safetensors");
  EXPECT_EQ(shard.tensors().size(), 3u * 4u);
  EXPECT_EQ(shard.info("exp_avg.blocks.0").shape, std::vector<int64_t>{m.units[1].shard_numel()});
  EXPECT_EQ(shard.metadata().at("rank"), "1");

  const checkpoint::Manifest again = checkpoint::parse_manifest(checkpoint::to_json_text(m), "round trip");
  EXPECT_EQ(checkpoint::to_json_text(again), checkpoint::to_json_text(m));
}

TEST(CheckpointConfigDiff, ListsChangedAddedAndRemovedKeys) {
  const auto diff = checkpoint::diff_config_text("[model]\ndim = 64\nheads = 4\n# comment\n",
                                                 "[model]\nheads = 4\ndim = 32\ndepth = [1, 2]\n");
  EXPECT_EQ(diff, (std::vector<std::string>{"model.depth: absent in the checkpoint, [ 1, 2 ] now",
                                            "model.dim: 64 in the checkpoint, 32 now"}));
  EXPECT_TRUE(checkpoint::diff_config_text("a = 1\n[b]\nc = 'x'\n", "[b]\nc = \"x\"\na2 = 1\n").size() == 2);
  EXPECT_TRUE(checkpoint::diff_config_text("x = 1 # same\n", "x = 1\n").empty());
  // Not TOML: compared line by line.
  EXPECT_EQ(checkpoint::diff_config_text("{a}\n", "{b}\n"),
            (std::vector<std::string>{"line 1: {a} in the checkpoint, {b} now"}));
}

TEST(CheckpointMergeOptions, SizesAndDtypes) {
  EXPECT_EQ(checkpoint::parse_byte_size("5GB"), 5'000'000'000u);
  EXPECT_EQ(checkpoint::parse_byte_size("500MB"), 500'000'000u);
  EXPECT_EQ(checkpoint::parse_byte_size("2GiB"), 2ull << 30);
  EXPECT_EQ(checkpoint::parse_byte_size("1.5kb"), 1500u);
  EXPECT_EQ(checkpoint::parse_byte_size("4096"), 4096u);
  EXPECT_EQ(checkpoint::parse_byte_size("0"), 0u);
  expect_error([] { checkpoint::parse_byte_size("5 parsecs"); }, {"unknown unit"});
  expect_error([] { checkpoint::parse_byte_size("big"); }, {"does not start with a number"});
  EXPECT_EQ(checkpoint::parse_merge_dtype("bf16"), torch::kBFloat16);
  expect_error([] { checkpoint::parse_merge_dtype("fp8"); }, {"fp32, bf16 or fp16"});
}

}  // namespace
}  // namespace zest::testing
