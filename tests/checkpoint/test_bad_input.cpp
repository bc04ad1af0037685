// Load refuses, with a clear error on every rank and the engine untouched: another model or config
// (differences listed), another optimizer, a corrupt / truncated / missing rank file, an unknown format
// version, a broken manifest, a folder without checkpoints. Merge and `ckpt inspect --verify` refuse the
// same broken checkpoints (they share the checks): a manifest that was edited (its checksum), one that is
// consistent but wrong (negative step, swapped or overlapping offsets, missing fields), rank files that
// belong to another rank or step. Version 1 checkpoints (no manifest checksum) are still read.
#include "ckpt_test_util.h"
#include "thread_world.h"

#include "formats/safetensors.h"

#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

#include <fstream>
#include <functional>
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

  // Applies `edit` to the manifest of `step_dir`; rehash = true recomputes its checksum (a consistent lie,
  // which only the layout rules can catch), false leaves it (an edit, which the checksum catches).
  static void edit_manifest(const std::string& step_dir, const std::function<void(nlohmann::ordered_json&)>& edit,
                            bool rehash = true) {
    auto manifest = nlohmann::ordered_json::parse(checkpoint::read_manifest_text(step_dir));
    edit(manifest);
    std::string text = manifest.dump(1);
    if (rehash) text = checkpoint::with_manifest_checksum(text, "test");
    std::ofstream(step_dir + "/manifest.json", std::ios::trunc) << text;
  }

  // Load, merge and inspect --verify all refuse `step_dir`, each naming every part.
  void expect_refused_everywhere(const std::string& step_dir, const std::vector<std::string>& parts) {
    expect_refused(toy_load_request(step_dir), parts);
    expect_error([&] { checkpoint::merge_offline(step_dir, dir_.sub("m.safetensors"), {}); }, parts);
    EXPECT_FALSE(fs::exists(dir_.sub("m.safetensors")));
    try {
      const auto report = checkpoint::inspect_checkpoint(step_dir, /*hash=*/true);
      ASSERT_FALSE(report.ok()) << "inspect --verify passed " << step_dir;
      std::string problems;
      for (size_t r = 0; r < report.files.size(); ++r) problems += report.files[r].problem(report.manifest.files[r]);
      for (const std::string& part : parts)
        EXPECT_NE(problems.find(part), std::string::npos) << "inspect lacks '" << part << "': " << problems;
    } catch (const zest::Error& e) {
      for (const std::string& part : parts)
        EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << "inspect lacks " << part << ": " << e.what();
    }
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
  text = std::regex_replace(text, std::regex("\"format_version\": 2"), "\"format_version\": 99");
  std::ofstream(bad + "/manifest.json", std::ios::trunc) << text;
  // The version is named, not the checksum mismatch the edit also causes.
  expect_refused_everywhere(bad, {"unknown checkpoint format version 99", "reads versions 1 to 2", "newer zest"});
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
  edit_manifest(bad, [&](auto& m) { m["files"][0]["bytes"] = fs::file_size(bad + "/rank_00000.safetensors"); });
  expect_refused(request, {"rank_00000.safetensors: does not match the checkpoint manifest",
                           "tensor 'master.embed' is F32 with 3 elements", "the manifest says F32 [",
                           "lacks tensor 'master.blocks.0'"});
}

// ---- the manifest: its checksum, its layout rules, its error messages ----

TEST_F(BadCheckpoint, EditedManifestFailsItsChecksum) {
  const std::string bad = copy();
  edit_manifest(bad, [](auto& m) { m["optimizer"]["lr"] = 0.5; }, /*rehash=*/false);
  expect_refused_everywhere(bad, {"manifest.json", "does not match its checksum", "corrupt or was edited"});
}

TEST_F(BadCheckpoint, NegativeStepIsRefused) {
  const std::string bad = copy();
  edit_manifest(bad, [](auto& m) {
    m["step"] = -5;
    m["scheduler"]["step"] = -5;
  });
  expect_refused_everywhere(bad, {"manifest.json", "field 'step' must be an integer >= 0, got an integer (-5)"});
}

TEST_F(BadCheckpoint, SwappedOrOverlappingOffsetsAreRefused) {
  const std::string swapped = copy();  // blocks.0.lin.weight [13,13] and blocks.0.lin.bias [13] trade places
  edit_manifest(swapped, [](auto& m) {
    auto& params = m["units"][1]["params"];
    std::swap(params[0]["offset"], params[1]["offset"]);
  });
  expect_refused_everywhere(swapped, {"layout is inconsistent", "unit 'blocks.0', parameter 'blocks.0.lin.weight': "
                                      "offset 169, expected 0", "swapped or overlapping offsets"});
  const std::string overlapping = copy();
  edit_manifest(overlapping, [](auto& m) { m["units"][1]["params"][2]["offset"] = 100; });
  expect_refused_everywhere(overlapping, {"parameter 'blocks.0.norm.weight': offset 100, expected 182"});
}

TEST_F(BadCheckpoint, ShapeAndNumelMustAgree) {
  const std::string bad = copy();
  edit_manifest(bad, [](auto& m) { m["units"][0]["params"][0]["shape"] = {7, 14}; });
  expect_refused_everywhere(bad, {"parameter 'embed.weight': numel 91 is not the product of its shape"});
}

TEST_F(BadCheckpoint, MissingFieldIsNamedWithWhatWasExpected) {
  const std::string bad = copy();
  edit_manifest(bad, [](auto& m) { m["units"][2]["params"][1].erase("shape"); });
  expect_refused_everywhere(bad, {"manifest.json: field 'units[2].params[1].shape' is missing (expected an "
                                  "array of integers >= 0)"});
  const std::string typed = copy();
  edit_manifest(typed, [](auto& m) { m["world_size"] = "two"; });
  expect_refused_everywhere(typed, {"field 'world_size' must be an integer", "got a string (\"two\")"});
}

TEST_F(BadCheckpoint, ManifestLayoutThatDisagreesWithTheRankFilesIsRefused) {
  const std::string bad = copy();  // one more unit padding element: rank files hold the old shard size
  edit_manifest(bad, [](auto& m) {
    m["units"][3]["padded_numel"] = m["units"][3]["padded_numel"].template get<int64_t>() + 32;
    m["units"][3]["shard_numel"] = m["units"][3]["shard_numel"].template get<int64_t>() + 16;
  });
  expect_refused_everywhere(bad, {"rank_00000.safetensors", "tensor 'master.head' is F32 with",
                                  "the manifest says F32 ["});
}

// ---- rank files that belong elsewhere ----

TEST_F(BadCheckpoint, SwappedRankFilesAreNamed) {
  const std::string bad = copy();
  fs::rename(bad + "/rank_00000.safetensors", bad + "/tmp");
  fs::rename(bad + "/rank_00001.safetensors", bad + "/rank_00000.safetensors");
  fs::rename(bad + "/tmp", bad + "/rank_00001.safetensors");
  expect_refused_everywhere(bad, {"rank_00000.safetensors", "its header says rank 1 of 2 at step 3",
                                  "this is rank 0's position", "swapped"});
  // Merge lists both files in one message.
  expect_error([&] { checkpoint::merge_offline(bad, dir_.sub("m.safetensors"), {}); },
               {"2 of 2 rank file(s) cannot be merged",
                "rank_00001.safetensors: does not match the checkpoint manifest",
                "its header says rank 0 of 2"});
}

TEST_F(BadCheckpoint, RankFileFromAnotherStepIsNamed) {
  run_ranks(2, [&](int, std::shared_ptr<Communicator> comm) {  // the same run, two steps later
    ToyRun run = make_toy_run(comm, {2, false, 7});
    train_toy(run, 0, 5);
    checkpoint::save(*run.engine, toy_save_request(dir_.sub("later")));
  });
  const std::string bad = copy();
  fs::copy_file(dir_.sub("later/step_00000005/rank_00001.safetensors"), bad + "/rank_00001.safetensors",
                fs::copy_options::overwrite_existing);
  expect_refused_everywhere(bad, {"rank_00001.safetensors", "at step 5, but the manifest is step 3",
                                  "copied from another checkpoint"});
  const std::string moved = copy();  // a whole manifest from another step
  fs::copy_file(dir_.sub("later/step_00000005/manifest.json"), moved + "/manifest.json",
                fs::copy_options::overwrite_existing);
  expect_refused_everywhere(moved, {"says step 5 but its folder is step_00000003"});
}

TEST_F(BadCheckpoint, FlippedBytesAreCaughtByMergeAndInspect) {
  const std::string bad = copy();
  const std::string file = bad + "/rank_00000.safetensors";
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(fs::file_size(file) / 2));
    f.write("\x01\x02\x03\x04", 4);
  }
  expect_refused_everywhere(bad, {"rank_00000.safetensors", "checksum", "corrupt"});
}

// Checkpoints written before the manifest had a checksum (format 1) are read with every other check.
TEST_F(BadCheckpoint, VersionOneCheckpointsAreStillRead) {
  const std::string old = copy();
  edit_manifest(old, [](auto& m) {
    m["format_version"] = 1;
    m.erase("manifest_xxh64");
  }, /*rehash=*/false);
  EXPECT_EQ(checkpoint::read_manifest(old).format_version, 1);
  EXPECT_TRUE(checkpoint::inspect_checkpoint(old, true).ok());
  EXPECT_NO_THROW(checkpoint::merge_offline(old, dir_.sub("v1.safetensors"), {}));
  run_ranks(2, [&](int, std::shared_ptr<Communicator> comm) {
    ToyRun run = make_toy_run(comm, {2, false, 99});
    EXPECT_EQ(checkpoint::load(*run.engine, toy_load_request(old)).step, 3);
  });
  // A version 2 manifest without its checksum, or a checksum present on a version 1 one, is refused.
  const std::string stripped = copy();
  edit_manifest(stripped, [](auto& m) { m.erase("manifest_xxh64"); }, /*rehash=*/false);
  expect_refused_everywhere(stripped, {"field 'manifest_xxh64' is missing (expected a string)"});
  const std::string relabelled = copy();
  edit_manifest(relabelled, [](auto& m) { m["format_version"] = 1; }, /*rehash=*/false);
  expect_refused_everywhere(relabelled, {"does not match its checksum"});
  // Version 1 manifests get the same layout rules.
  const std::string old_bad = copy();
  edit_manifest(old_bad, [](auto& m) {
    m["format_version"] = 1;
    m.erase("manifest_xxh64");
    m.erase("world_size");
  }, /*rehash=*/false);
  expect_refused_everywhere(old_bad, {"field 'world_size' is missing (expected an integer"});
}

}  // namespace
}  // namespace zest::testing
