// The EMA of the weights in checkpoints: saved as the "ema" kind and resumed bit for bit at every stage
// (sync and async), resharded by name at other world sizes and stages exactly like the master, what a
// resume does when only one side has an EMA, the manifest rules for it, and `merge --ema` (offline,
// streaming and checksummed; online at the end of training) giving exactly the gathered EMA.
#include "ckpt_test_util.h"
#include "thread_world.h"

#include "formats/json_field.h"
#include "formats/safetensors.h"

#include <gtest/gtest.h>

#include <fstream>
#include <iostream>
#include <sstream>

namespace zest::testing {
namespace {

namespace fs = std::filesystem;
using Named = std::map<std::string, torch::Tensor>;

constexpr int64_t kSaveStep = 7;  // odd: with update_every = 2 the next update comes after the resume
constexpr int64_t kEndStep = 14;

std::string join(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& line : lines) out += line + "\n";
  return out;
}

// ---- save → resume ----

struct EmaResumeCase {
  int stage;
  bool async;
};

class EmaExactResume : public ::testing::TestWithParam<EmaResumeCase> {};

// 7 steps + save + 7 steps equals load + 7 steps, bitwise: master, optimizer state, EMA, counters; and
// right after the load the EMA is exactly the saved one.
TEST_P(EmaExactResume, SevenPlusSevenEqualsLoadPlusSeven) {
  const EmaResumeCase c = GetParam();
  TempDir dir;
  std::vector<Named> uninterrupted(2), resumed(2), at_save(2), after_load(2);
  run_ranks(2, [&](int rank, std::shared_ptr<Communicator> comm) {
    ToyRun a = make_toy_run(comm, {c.stage, false, 7, /*ema=*/true});
    train_toy(a, 0, kSaveStep);
    at_save[rank] = ema_by_name(*a.engine);
    checkpoint::Saver saver;
    auto request = toy_save_request(dir.path());
    request.async = c.async;
    saver.save(*a.engine, request);
    for (int64_t step = kSaveStep; step < kEndStep; ++step) {  // an async write goes on meanwhile
      train_toy(a, step, step + 1);
      saver.poll(*comm);
    }
    saver.wait(*comm);
    uninterrupted[rank] = engine_state(*a.engine);

    ToyRun b = make_toy_run(comm, {c.stage, false, 99, /*ema=*/true});
    checkpoint::load(*b.engine, toy_load_request(dir.path()));
    after_load[rank] = ema_by_name(*b.engine);
    train_toy(b, kSaveStep, kEndStep);
    resumed[rank] = engine_state(*b.engine);
  });
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(uninterrupted[r].count("ema"));
    expect_bitwise_equal(at_save[r], after_load[r], "EMA right after the load, rank " + std::to_string(r));
    expect_bitwise_equal(uninterrupted[r], resumed[r], "engine state with EMA, rank " + std::to_string(r));
  }
  // The EMA is not the master under another name: it lags the trained weights.
  EXPECT_FALSE(torch::equal(uninterrupted[0].at("ema"), uninterrupted[0].at("master")));
}

INSTANTIATE_TEST_SUITE_P(CheckpointEma, EmaExactResume,
                         ::testing::Values(EmaResumeCase{0, false}, EmaResumeCase{1, false}, EmaResumeCase{2, false},
                                           EmaResumeCase{3, false}, EmaResumeCase{2, true}),
                         [](const ::testing::TestParamInfo<EmaResumeCase>& info) {
                           return "stage" + std::to_string(info.param.stage) + (info.param.async ? "_async" : "_sync");
                         });

// ---- resharding ----

// Saved by 2 ranks at stage 2; loaded by 1, 3 and 4 ranks at other stages: the EMA is re-sliced by name
// like the master (bitwise the saved one), and training on continues as the uninterrupted run does.
TEST(CheckpointEma, ReshardsAtOtherWorldSizesAndStages) {
  TempDir dir;
  Named saved, uninterrupted;
  run_ranks(2, [&](int rank, std::shared_ptr<Communicator> comm) {
    ToyRun a = make_toy_run(comm, {2, false, 7, true});
    train_toy(a, 0, kSaveStep);
    checkpoint::save(*a.engine, toy_save_request(dir.path()));
    const Named ema = ema_by_name(*a.engine);
    train_toy(a, kSaveStep, kEndStep);
    const Named later = ema_by_name(*a.engine);
    if (rank == 0) saved = ema, uninterrupted = later;
  });
  for (const auto& [world, stage] : {std::pair{1, 0}, {3, 3}, {4, 1}}) {
    const std::string what = std::to_string(world) + " ranks, stage " + std::to_string(stage);
    Named loaded, continued;
    run_ranks(world, [&](int rank, std::shared_ptr<Communicator> comm) {
      ToyRun b = make_toy_run(comm, {stage, false, 99, true});
      EXPECT_EQ(checkpoint::load(*b.engine, toy_load_request(dir.path())).saved_world_size, 2);
      const Named ema = ema_by_name(*b.engine);
      train_toy(b, kSaveStep, kEndStep);
      const Named later = ema_by_name(*b.engine);
      if (rank == 0) loaded = ema, continued = later;
    });
    expect_bitwise_equal(saved, loaded, "EMA loaded by " + what);
    EXPECT_LT(max_relative_difference(uninterrupted, continued), 1e-6) << "EMA after training on, " << what;
  }
}

// ---- one side without an EMA ----

// A checkpoint with an EMA resumed by a run without [ema]: the EMA is left unread, with a note; training
// state is restored as always, and the run's next checkpoint has no EMA.
TEST(CheckpointEma, ResumingWithoutEmaIgnoresTheSavedOneWithANote) {
  TempDir dir;
  run_ranks(2, [&](int rank, std::shared_ptr<Communicator> comm) {
    ToyRun a = make_toy_run(comm, {2, false, 7, true});
    train_toy(a, 0, kSaveStep);
    checkpoint::save(*a.engine, toy_save_request(dir.sub("with")));
    ToyRun b = make_toy_run(comm, {2, false, 99, false});
    const auto loaded = checkpoint::load(*b.engine, toy_load_request(dir.sub("with")));
    EXPECT_EQ(b.engine->ema(), nullptr);
    EXPECT_NE(join(loaded.notes).find("the checkpoint's EMA of the weights is not loaded: this run has no [ema]"),
              std::string::npos) << join(loaded.notes);
    auto expected = engine_state(*a.engine);
    expected.erase("ema");
    expect_bitwise_equal(expected, engine_state(*b.engine), "state without the EMA");
    checkpoint::save(*b.engine, toy_save_request(dir.sub("without")));
    if (rank == 0) {
      EXPECT_FALSE(checkpoint::read_manifest(dir.sub("without/step_00000007")).has_ema());
    }
  });
}

// A checkpoint without an EMA resumed by a run with [ema]: the EMA starts from the resumed weights (not
// from the run's initial ones), with a note; from there it averages as usual.
TEST(CheckpointEma, EnablingEmaOnACheckpointWithoutOneStartsFromTheResumedWeights) {
  TempDir dir;
  run_ranks(2, [&](int rank, std::shared_ptr<Communicator> comm) {
    ToyRun a = make_toy_run(comm, {1, false, 7, false});
    train_toy(a, 0, kSaveStep);
    checkpoint::save(*a.engine, toy_save_request(dir.path()));
    ToyRun b = make_toy_run(comm, {1, false, 99, true});
    const auto loaded = checkpoint::load(*b.engine, toy_load_request(dir.path()));
    EXPECT_NE(join(loaded.notes).find("the checkpoint has no EMA of the weights: the EMA starts from the resumed "
                                      "weights of step 7"),
              std::string::npos) << join(loaded.notes);
    EXPECT_TRUE(torch::equal(b.engine->ema()->shard(), b.engine->master_shard())) << "rank " << rank;
    train_toy(b, kSaveStep, kSaveStep + 2);
    EXPECT_FALSE(torch::equal(b.engine->ema()->shard(), b.engine->master_shard()));
  });
}

// Different [ema] settings on resume: the saved EMA is loaded, the run's settings apply, a note each.
TEST(CheckpointEma, ChangedEmaSettingsAreNotes) {
  TempDir dir;
  run_ranks(1, [&](int, std::shared_ptr<Communicator> comm) {
    ToyRun a = make_toy_run(comm, {2, false, 7, true});
    train_toy(a, 0, 3);
    checkpoint::save(*a.engine, toy_save_request(dir.path()));
    ToyRun b = make_toy_run(comm, {2, false, 99, false});
    EmaConfig other = toy_ema();
    other.decay = 0.99;
    other.update_every = 3;
    b.engine->enable_ema(other);
    const auto loaded = checkpoint::load(*b.engine, toy_load_request(dir.path()));
    const std::string notes = join(loaded.notes);
    EXPECT_NE(notes.find("ema.decay: 0.9 in the checkpoint, 0.99 now"), std::string::npos) << notes;
    EXPECT_NE(notes.find("ema.update_every: 2 in the checkpoint, 3 now"), std::string::npos) << notes;
    EXPECT_TRUE(torch::equal(a.engine->ema()->shard(), b.engine->ema()->shard()));
  });
}

// ---- manifest rules ----

class EmaManifest : public ::testing::Test {
 protected:
  void SetUp() override {
    run_ranks(1, [&](int, std::shared_ptr<Communicator> comm) {
      ToyRun a = make_toy_run(comm, {2, false, 7, true});
      train_toy(a, 0, 2);
      checkpoint::save(*a.engine, toy_save_request(dir_.path()));
    });
    path_ = dir_.sub("step_00000002/manifest.json");
    std::ifstream in(path_);
    json_ = Json::parse(in);
  }
  // The edited manifest, re-hashed (a consistent lie), through the one parser every reader uses.
  void expect_refused(const std::function<void(Json&)>& edit, const std::string& part) {
    Json j = json_;
    edit(j);
    const std::string text = checkpoint::with_manifest_checksum(j.dump(1), path_);
    expect_error([&] { checkpoint::parse_manifest(text, path_); }, {path_, part});
  }
  TempDir dir_;
  std::string path_;
  Json json_;
};

TEST_F(EmaManifest, KindsAndSettingsAgree) {
  const checkpoint::Manifest m = checkpoint::parse_manifest(json_.dump(1), path_);
  EXPECT_EQ(m.kinds, (std::vector<std::string>{"master", "exp_avg", "exp_avg_sq", "ema"}));
  ASSERT_TRUE(m.ema.has_value());
  EXPECT_EQ(m.ema->decay, 0.9);
  EXPECT_EQ(m.ema->update_every, 2);
  EXPECT_EQ(m.ema->start_step, 1);
  EXPECT_TRUE(m.ema->use_ema_warmup);
  expect_refused([](auto& j) { j.erase("ema"); },
                 "kinds are [master, exp_avg, exp_avg_sq, ema], expected [master, exp_avg, exp_avg_sq] for optimizer "
                 "adamw without an EMA");
  expect_refused([](auto& j) { j["kinds"].erase(3); }, "expected [master, exp_avg, exp_avg_sq, ema] for optimizer "
                                                       "adamw with an EMA");
  expect_refused([](auto& j) { j["kinds"] = {"master", "ema", "exp_avg", "exp_avg_sq"}; }, "kinds are");
  expect_refused([](auto& j) { j["ema"]["decay"] = 1.5; }, "ema.decay is 1.5, must be in [0, 1]");
  expect_refused([](auto& j) { j["ema"]["update_every"] = 0; }, "ema.update_every is 0, must be >= 1");
  expect_refused([](auto& j) { j["ema"]["power"] = -1; }, "ema.power is -1, must be > 0");
  expect_refused([](auto& j) { j["ema"].erase("start_step"); }, "ema.start_step");
  expect_refused([](auto& j) { j["ema"]["use_ema_warmup"] = 1; }, "ema.use_ema_warmup");
}

// ---- merge --ema ----

// Offline (in pieces smaller than a parameter, and sharded) and online: exactly the gathered EMA, under
// every state-dict name; the default merge still writes the trained weights.
TEST(CheckpointEma, MergeEmaWritesTheGatheredEma) {
  TempDir dir;
  Named ema, params;
  run_ranks(2, [&](int rank, std::shared_ptr<Communicator> comm) {
    ToyRun a = make_toy_run(comm, {2, false, 7, true});
    train_toy(a, 0, kSaveStep);
    checkpoint::save(*a.engine, toy_save_request(dir.sub("ckpt")));
    const Named gathered = ema_by_name(*a.engine);
    checkpoint::MergeOptions online;
    online.ema = true;
    online.model_name = kModelName;
    checkpoint::merge_online(*a.engine, dir.sub("online.safetensors"), online);
    if (rank == 0) ema = gathered, params = params_of(*a.model);
  });
  checkpoint::MergeOptions options;
  options.ema = true;
  options.chunk_numel = 5;
  checkpoint::merge_offline(dir.sub("ckpt"), dir.sub("ema.safetensors"), options);
  options.shard_size_bytes = 400;
  const auto sharded = checkpoint::merge_offline(dir.sub("ckpt"), dir.sub("sharded/ema.safetensors"), options);
  EXPECT_GT(sharded.files.size(), 1u);
  checkpoint::merge_offline(dir.sub("ckpt"), dir.sub("master.safetensors"), {});

  auto read = [](const std::string& path) {
    Named out;
    for (auto& [name, t] : safetensors::load_file(path)) out[name] = t;
    return out;
  };
  expect_bitwise_equal(read(dir.sub("ema.safetensors")), ema, "offline merge --ema");
  expect_bitwise_equal(read(dir.sub("online.safetensors")), ema, "online merge of the EMA");
  Named from_shards;
  for (const std::string& file : sharded.files)
    for (auto& [name, t] : safetensors::load_file(file)) from_shards[name] = t;
  expect_bitwise_equal(from_shards, ema, "sharded merge --ema");
  expect_bitwise_equal(read(dir.sub("master.safetensors")), params, "default merge");
  EXPECT_EQ(safetensors::Reader(dir.sub("ema.safetensors")).metadata().at("zest.weights"), "ema");
  EXPECT_EQ(safetensors::Reader(dir.sub("online.safetensors")).metadata().at("zest.weights"), "ema");
  EXPECT_EQ(safetensors::Reader(dir.sub("master.safetensors")).metadata().at("zest.weights"), "master");
}

// The EMA's bytes are checksummed like the rest: a flipped bit in the last EMA value fails the merge
// before the output gets its name.
TEST(CheckpointEma, MergeEmaChecksumsTheEmaBytes) {
  TempDir dir;
  run_ranks(2, [&](int, std::shared_ptr<Communicator> comm) {
    ToyRun a = make_toy_run(comm, {2, false, 7, true});
    train_toy(a, 0, 3);
    checkpoint::save(*a.engine, toy_save_request(dir.sub("ckpt")));
  });
  const std::string rank1 = dir.sub("ckpt/step_00000003/rank_00001.safetensors");
  const safetensors::Reader reader(rank1);
  const auto& last = reader.tensors().back();
  ASSERT_EQ(last.name.rfind("ema.", 0), 0u) << last.name;  // kinds outermost: the EMA comes last
  {
    const auto at = static_cast<std::streamoff>(reader.data_start() + last.data_end - 2);
    std::fstream f(rank1, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(at);
    const char byte = static_cast<char>(f.get() ^ 0x01);
    f.seekp(at);
    f.put(byte);
  }
  checkpoint::MergeOptions options;
  options.ema = true;
  expect_error([&] { checkpoint::merge_offline(dir.sub("ckpt"), dir.sub("out/ema.safetensors"), options); },
               {"rank_00001.safetensors", "checksum"});
  EXPECT_FALSE(fs::exists(dir.sub("out/ema.safetensors")));
}

TEST(CheckpointEma, MergeEmaRefusesACheckpointWithoutOne) {
  TempDir dir;
  run_ranks(2, [&](int, std::shared_ptr<Communicator> comm) {
    ToyRun a = make_toy_run(comm, {2, false, 7, false});
    train_toy(a, 0, 3);
    checkpoint::save(*a.engine, toy_save_request(dir.sub("ckpt")));
    checkpoint::MergeOptions online;
    online.ema = true;
    expect_error([&] { checkpoint::merge_online(*a.engine, dir.sub("online.safetensors"), online); },
                 {"EMA of the weights was asked for, but this run keeps none", "[ema]"});
  });
  checkpoint::MergeOptions options;
  options.ema = true;
  expect_error([&] { checkpoint::merge_offline(dir.sub("ckpt"), dir.sub("ema.safetensors"), options); },
               {dir.sub("ckpt/step_00000003"), "has no EMA of the weights", "merge without --ema"});
  EXPECT_FALSE(fs::exists(dir.sub("ema.safetensors")));
  EXPECT_FALSE(fs::exists(dir.sub("ema.safetensors.tmp")));
  EXPECT_FALSE(fs::exists(dir.sub("online.safetensors")));
}

}  // namespace
}  // namespace zest::testing
