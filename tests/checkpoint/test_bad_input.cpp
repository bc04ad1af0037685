// Load refuses, with a clear error on every rank and the engine untouched: another model or config
// (differences listed), another optimizer, a corrupt / truncated / missing rank file, an unknown format
// version, a broken manifest, a folder without checkpoints. Merge refuses the same broken files.
#include "ckpt_test_util.h"
#include "thread_world.h"

#include "checkpoint/safetensors.h"

#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

#include <fstream>
#include <regex>

namespace zest::testing {
namespace {
namespace fs = std::filesystem;

class BadCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    run_ranks(2, [&](int, std::shared_ptr<Communicator> comm) {
      ToyRun run = make_toy_run(comm, {2, false, 7});
      train_toy(run, 0, 3);
      checkpoint::save(*run.engine, toy_save_request(dir_.sub("good")));
    });
    step_dir_ = checkpoint::resolve_checkpoint(dir_.sub("good"));
  }

  // A fresh copy of the good checkpoint to damage.
  std::string copy() {
    const std::string target = dir_.sub("bad" + std::to_string(copies_++));
    fs::copy(dir_.sub("good"), target, fs::copy_options::recursive);
    return checkpoint::resolve_checkpoint(target);
  }

  // Loads `path` on `world` ranks (stage 2, ToyNet unless `request` says otherwise) expecting an error
  // with every part in `parts`, and checks that no rank's engine changed.
  void expect_refused(const checkpoint::LoadRequest& request, const std::vector<std::string>& parts,
                      int world = 2, bool sgd = false) {
    run_ranks(world, [&](int, std::shared_ptr<Communicator> comm) {
      ToyRun run = make_toy_run(comm, {2, sgd, 99});
      const auto before = engine_state(*run.engine);
      const auto params_before = params_of(*run.model);
      expect_error([&] { checkpoint::load(*run.engine, request); }, parts);
      expect_bitwise_equal(before, engine_state(*run.engine), "engine state after a refused load");
      expect_bitwise_equal(params_before, params_of(*run.model), "parameters after a refused load");
    });
  }

  TempDir dir_;
  std::string step_dir_;
  int copies_ = 0;
};

TEST_F(BadCheckpoint, ModelNameAndConfigDifferencesAreListed) {
  auto request = toy_load_request(step_dir_);
  request.model_name = "othernet";
  request.model_config = "[model]\nname = \"toynet\"\nwidth = 17\n\n[model.head]\nout = 5\nact = \"gelu\"\n";
  expect_refused(request, {"does not fit this run", "model name: 'toynet' in the checkpoint, 'othernet' now",
                           "model.width: 13 in the checkpoint, 17 now",
                           "model.head.act: absent in the checkpoint, 'gelu' now"});
}

TEST_F(BadCheckpoint, OtherParametersAreListed) {
  run_ranks(1, [&](int, std::shared_ptr<Communicator> comm) {
    auto model = std::make_shared<ElementwiseNet>(1);
    EngineConfig ec;
    ec.precision = Precision::fp32;
    Engine engine(model, ec, toy_optim(false), toy_schedule(), comm);
    const auto before = engine_state(engine);
    expect_error([&] { checkpoint::load(engine, toy_load_request(step_dir_)); },
                 {"3 model parameter(s) missing from the checkpoint: w1, b1, w2",
                  "13 checkpoint parameter(s) not in the model: embed.weight"});
    expect_bitwise_equal(before, engine_state(engine), "engine state after a refused load");
  });
}

TEST_F(BadCheckpoint, OtherOptimizerIsRefused) {
  expect_refused(toy_load_request(step_dir_), {"optimizer: adamw in the checkpoint, sgd now"}, 2, /*sgd=*/true);
}

TEST_F(BadCheckpoint, CorruptRankFileFailsTheChecksumOnEveryRank) {
  const std::string bad = copy();
  const std::string file = bad + "/rank_00001.safetensors";
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(fs::file_size(file) - 5));
    f.put('\x7f');
  }
  // Rank 1 hashes file 1 (round robin); rank 0 must report the same failure.
  expect_refused(toy_load_request(bad), {"rank_00001.safetensors", "checksum", "corrupt"});
  // Without checksums the size still matches, so the flip would go unnoticed: it is on by default.
  auto unchecked = toy_load_request(bad);
  unchecked.verify_checksums = false;
  run_ranks(2, [&](int, std::shared_ptr<Communicator> comm) {
    ToyRun run = make_toy_run(comm, {2, false, 99});
    EXPECT_NO_THROW(checkpoint::load(*run.engine, unchecked));
  });
}

TEST_F(BadCheckpoint, TruncatedRankFileIsRefused) {
  const std::string bad = copy();
  const std::string file = bad + "/rank_00000.safetensors";
  fs::resize_file(file, fs::file_size(file) - 8);
  expect_refused(toy_load_request(bad), {"rank_00000.safetensors", "size is", "truncated"}, 3);
  expect_error([&] { checkpoint::merge_offline(bad, dir_.sub("m.safetensors"), {}); }, {"rank_00000", "size is"});
  EXPECT_FALSE(fs::exists(dir_.sub("m.safetensors")));
}

TEST_F(BadCheckpoint, MissingRankFileIsRefused) {
  const std::string bad = copy();
  fs::remove(bad + "/rank_00001.safetensors");
  expect_refused(toy_load_request(bad), {"rank_00001.safetensors", "missing"}, 1);
}

TEST_F(BadCheckpoint, UnknownFormatVersionIsRefused) {
  const std::string bad = copy();
  std::string text = checkpoint::read_manifest_text(bad);
  text = std::regex_replace(text, std::regex("\"format_version\": 1"), "\"format_version\": 99");
  std::ofstream(bad + "/manifest.json", std::ios::trunc) << text;
  expect_refused(toy_load_request(bad), {"unknown checkpoint format version 99", "reads version 1"});
}

TEST_F(BadCheckpoint, BrokenManifestIsRefused) {
  const std::string bad = copy();
  const std::string text = checkpoint::read_manifest_text(bad);
  std::ofstream(bad + "/manifest.json", std::ios::trunc) << text.substr(0, text.size() / 2);
  expect_refused(toy_load_request(bad), {"manifest.json", "not valid JSON"});
}

TEST_F(BadCheckpoint, FolderWithoutCheckpointIsRefused) {
  fs::create_directories(dir_.sub("empty/step_00000005.tmp"));  // an interrupted save is not a checkpoint
  expect_refused(toy_load_request(dir_.sub("empty")), {"holds no committed checkpoint"});
  expect_refused(toy_load_request(dir_.sub("nowhere")), {"no such checkpoint folder"});
}

TEST_F(BadCheckpoint, RankFileWithOtherTensorsIsRefused) {
  const std::string bad = copy();
  safetensors::save_file(bad + "/rank_00000.safetensors", {{"master.embed", torch::zeros({3})}});
  auto request = toy_load_request(bad);
  request.verify_checksums = false;  // with the size fixed up too, only the header check can catch it
  auto manifest = nlohmann::json::parse(checkpoint::read_manifest_text(bad));
  manifest["files"][0]["bytes"] = fs::file_size(bad + "/rank_00000.safetensors");
  std::ofstream(bad + "/manifest.json", std::ios::trunc) << manifest.dump(1);
  expect_refused(request, {"rank_00000.safetensors", "tensor 'master.embed' should be F32", "per the manifest"});
}

}  // namespace
}  // namespace zest::testing
