// Datasets on disk: synth → read round trips for both formats, sample assembly (normalisation, crop,
// pad, masks), model-width checks, and bad data (truncated shard, wrong width, missing tensor, sample
// count mismatch) giving errors that name the file.
#include "formats/safetensors.h"
#include "data/dataset.h"
#include "data/model_features.h"
#include "data/motion_dataset.h"
#include "data/motion_stats.h"
#include "dataio_test_util.h"
#include "core/check.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>

namespace zest::testing {
namespace {

namespace fs = std::filesystem;

// Runs `fn`, expects a zest::Error whose message contains every one of `parts`.
template <typename Fn>
void expect_error(Fn&& fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "no error thrown";
  } catch (const Error& e) {
    for (const std::string& part : parts) EXPECT_NE(std::string(e.what()).find(part), std::string::npos)
        << "message lacks '" << part << "': " << e.what();
  }
}

void edit_manifest(const std::string& dir, const std::function<void(nlohmann::json&)>& edit) {
  const std::string path = dir + "/dataset.json";
  nlohmann::json doc = nlohmann::json::parse(std::ifstream(path));
  edit(doc);
  std::ofstream(path) << doc.dump(2);
}

TEST(MotionData, SynthRoundTripMatchesTheModelAndNormalises) {
  ScratchDir dir("motion-roundtrip");
  const DatasetManifest m = synth_small(dir.path(), "hymotion_tiny", 20);
  EXPECT_EQ(m.shards.size(), 3u);  // 7 + 7 + 6
  EXPECT_EQ(m.total_samples(), 20);
  const ExpectedFeatures model = builtin_model_features("hymotion_tiny");
  EXPECT_EQ(model.features.at("motion_dim"), 12);
  const auto dataset = open_dataset(dir.path(), {.seq_len = 16}, &model);
  ASSERT_EQ(dataset->size(), 20);
  const Sample s = dataset->get(9, 0);
  EXPECT_EQ(s.at("x").sizes(), (std::vector<int64_t>{16, 12}));
  EXPECT_EQ(s.at("x_mask_temporal").sizes(), (std::vector<int64_t>{16}));
  EXPECT_EQ(s.at("ctxt_input").sizes(), (std::vector<int64_t>{8, 24}));
  EXPECT_EQ(s.at("ctxt_mask_temporal").scalar_type(), torch::kBool);
  EXPECT_EQ(s.at("vtxt_input").sizes(), (std::vector<int64_t>{1, 16}));
  EXPECT_TRUE(s.at("ctxt_mask_temporal")[0].item<bool>());  // at least half the tokens are valid

  // Normalised with the dataset's own statistics: over all full clips, mean ≈ 0 and std ≈ 1 per feature.
  const auto& motion = dynamic_cast<const MotionDataset&>(*dataset);
  const auto full = open_dataset(dir.path(), {.seq_len = motion.max_clip_frames()});
  std::vector<torch::Tensor> frames;
  for (int64_t i = 0; i < full->size(); ++i) {
    const Sample f = full->get(i, 0);
    frames.push_back(f.at("x").index({f.at("x_mask_temporal")}));
    EXPECT_EQ(f.at("x_mask_temporal").sum().item<int64_t>(), motion.clip_frames(i));
  }
  const auto all = torch::cat(frames);
  EXPECT_LT(all.mean(0).abs().max().item<double>(), 1e-3);
  EXPECT_NEAR(all.std(0, /*unbiased=*/false).mean().item<double>(), 1.0, 1e-3);
}

TEST(MotionData, CropIsSeededAndPaddingIsMasked) {
  ScratchDir dir("motion-crop");
  synth_small(dir.path(), "hymotion_tiny", 10);
  const auto dataset = open_dataset(dir.path(), {.seq_len = 10});  // clips have 12..40 frames: always cropped
  const auto long_view = open_dataset(dir.path(), {.seq_len = 64});
  const auto& motion = dynamic_cast<const MotionDataset&>(*long_view);
  EXPECT_TRUE(torch::equal(dataset->get(3, 42).at("x"), dataset->get(3, 42).at("x")));
  bool differs = false;
  for (uint64_t seed = 1; seed < 6; ++seed)
    differs |= !torch::equal(dataset->get(3, 0).at("x"), dataset->get(3, seed).at("x"));
  EXPECT_TRUE(differs) << "the crop window ignores the seed";
  // The crop is a window of the full clip.
  const Sample crop = dataset->get(3, 7), whole = long_view->get(3, 0);
  const int64_t frames = motion.clip_frames(3);
  const int64_t start = static_cast<int64_t>(7 % static_cast<uint64_t>(frames - 10 + 1));
  EXPECT_TRUE(torch::allclose(crop.at("x"), whole.at("x").narrow(0, start, 10)));
  EXPECT_TRUE(crop.at("x_mask_temporal").all().item<bool>());
  // Padding: frames past the clip are zero and masked out.
  EXPECT_EQ(whole.at("x_mask_temporal").sum().item<int64_t>(), frames);
  EXPECT_EQ(whole.at("x").narrow(0, frames, 64 - frames).abs().sum().item<double>(), 0.0);
}

TEST(LatentData, SynthRoundTripWithSdxlConditioning) {
  ScratchDir dir("latents-roundtrip");
  synth_small(dir.path(), "unet_tiny", 9, 4);
  const ExpectedFeatures model = builtin_model_features("unet_tiny");
  EXPECT_EQ(model.features.at("pooled_dim"), 8);  // 32 − 6·4
  EXPECT_EQ(model.features.at("time_ids"), 1);
  const auto dataset = open_dataset(dir.path(), {}, &model);
  const Sample s = dataset->get(8, 0);
  EXPECT_EQ(s.at("sample").sizes(), (std::vector<int64_t>{4, 8, 8}));
  EXPECT_EQ(s.at("encoder_hidden_states").sizes(), (std::vector<int64_t>{77, 12}));
  EXPECT_EQ(s.at("text_embeds").sizes(), (std::vector<int64_t>{8}));
  EXPECT_TRUE(torch::equal(s.at("time_ids"), torch::tensor({64.f, 64.f, 0.f, 0.f, 64.f, 64.f})));
  // Reading is exact: the sample equals its slice of the shard file.
  const auto latents = safetensors::Reader(dir / "shard-00002.safetensors").read("latents");
  EXPECT_TRUE(torch::equal(s.at("sample"), latents[0]));
}

TEST(LatentData, Sd15HasNoPooledEmbedding) {
  const ExpectedFeatures model = builtin_model_features("unet_sd15");
  EXPECT_EQ(model.features.at("pooled_dim"), 0);
  EXPECT_EQ(model.features.at("text_dim"), 768);
  EXPECT_EQ(model.defaults.at("height"), 64);
  ScratchDir dir("latents-sd15");
  SynthOptions o;
  o.samples = 2;
  o.widths = {{"height", 4}, {"width", 4}};
  synthesize_dataset(dir.path(), model, o);
  const Sample s = open_dataset(dir.path(), {}, &model)->get(1, 0);
  EXPECT_EQ(s.count("text_embeds"), 0u);
  EXPECT_EQ(s.count("time_ids"), 0u);
  EXPECT_EQ(s.at("sample").sizes(), (std::vector<int64_t>{4, 4, 4}));
}

TEST(DataErrors, DatasetForAnotherModelNamesTheWidth) {
  ScratchDir dir("wrong-model");
  synth_small(dir.path(), "hymotion_tiny", 3);
  const ExpectedFeatures big = builtin_model_features("hymotion_1b");
  expect_error([&] { open_dataset(dir.path(), {}, &big); },
               {dir / "dataset.json", "wrong feature width", "motion_dim = 12", "expects 201"});
  const ExpectedFeatures unet = builtin_model_features("unet_tiny");
  expect_error([&] { open_dataset(dir.path(), {}, &unet); }, {"zest.motion.v1", "zest.latents.v1"});
}

TEST(DataErrors, TruncatedShardNamesTheFile) {
  ScratchDir dir("truncated");
  synth_small(dir.path(), "hymotion_tiny", 10);
  const std::string shard = dir / "shard-00001.safetensors";
  fs::resize_file(shard, fs::file_size(shard) - 100);
  expect_error([&] { open_dataset(dir.path()); }, {shard, "truncated"});
}

TEST(DataErrors, WrongFeatureWidthInAShardNamesTheFile) {
  ScratchDir dir("wrong-width");
  synth_small(dir.path(), "hymotion_tiny", 10);
  // dataset.json claims 13 features per frame; the shards hold 12.
  edit_manifest(dir.path(), [](nlohmann::json& doc) { doc["features"]["motion_dim"] = 13; });
  expect_error([&] { open_dataset(dir.path()); }, {dir / "shard-00000.safetensors", "wrong feature width", "'motion'"});
}

TEST(DataErrors, SampleCountMismatchAndMissingTensorNameTheFile) {
  ScratchDir dir("count");
  synth_small(dir.path(), "unet_tiny", 6, 3);
  edit_manifest(dir.path(), [](nlohmann::json& doc) { doc["shards"][1]["samples"] = 4; });
  expect_error([&] { open_dataset(dir.path()); }, {dir / "shard-00001.safetensors", "sample count mismatch"});

  edit_manifest(dir.path(), [](nlohmann::json& doc) { doc["shards"][1]["samples"] = 3; });
  auto tensors = safetensors::load_file(dir / "shard-00001.safetensors");
  tensors.erase(std::remove_if(tensors.begin(), tensors.end(), [](const auto& t) { return t.first == "pooled"; }),
                tensors.end());
  safetensors::save_file(dir / "shard-00001.safetensors", tensors);
  expect_error([&] { open_dataset(dir.path()); }, {dir / "shard-00001.safetensors", "missing tensor 'pooled'"});
}

TEST(DataErrors, ManifestProblemsNameDatasetJson) {
  ScratchDir dir("manifest");
  expect_error([&] { read_manifest(dir.path()); }, {dir / "dataset.json", "cannot open"});
  synth_small(dir.path(), "hymotion_tiny", 2);
  edit_manifest(dir.path(), [](nlohmann::json& doc) { doc["format"] = "zest.motion.v9"; });
  expect_error([&] { read_manifest(dir.path()); }, {dir / "dataset.json", "zest.motion.v9"});
  edit_manifest(dir.path(), [](nlohmann::json& doc) {
    doc["format"] = "zest.motion.v1";
    doc["features"].erase("text_dim");
  });
  expect_error([&] { read_manifest(dir.path()); }, {dir / "dataset.json", "field 'features.text_dim' is missing (zest.motion.v1 needs it)"});
}

TEST(MotionStats, RecomputedStatsMatchTheSynthesisedOnes) {
  ScratchDir dir("stats");
  const DatasetManifest m = synth_small(dir.path(), "hymotion_tiny", 8);
  const MotionStats written = read_motion_stats(dir / "stats.safetensors", 12);
  const MotionStats again = compute_motion_stats(dir.path(), m);
  EXPECT_TRUE(torch::allclose(written.mean, again.mean));
  EXPECT_TRUE(torch::allclose(written.std, again.std));
  EXPECT_GT(written.frames, 8 * 12 - 1);
  expect_error([&] { read_motion_stats(dir / "stats.safetensors", 13); }, {dir / "stats.safetensors", "[13]"});
}

TEST(Synth, SameSeedSameDataOtherSeedOtherData) {
  ScratchDir a("synth-a"), b("synth-b");
  synth_small(a.path(), "hymotion_tiny", 5, 2, 7);
  synth_small(b.path(), "hymotion_tiny", 5, 5, 7);  // other sharding, same content
  const auto da = open_dataset(a.path(), {.seq_len = 40}), db = open_dataset(b.path(), {.seq_len = 40});
  for (int64_t i = 0; i < 5; ++i)
    EXPECT_TRUE(torch::equal(da->get(i, 0).at("vtxt_input"), db->get(i, 0).at("vtxt_input")));
  synth_small(b.path(), "hymotion_tiny", 5, 5, 8);
  EXPECT_FALSE(torch::equal(da->get(0, 0).at("vtxt_input"), open_dataset(b.path())->get(0, 0).at("vtxt_input")));
  SynthOptions again;
  again.samples = 1;
  expect_error([&] { synthesize_dataset(a.path(), builtin_model_features("hymotion_tiny"), again); },
               {a.path(), "--overwrite"});
}

// Throughput counts what each format's class says (Dataset::items_in): a motion batch's valid frames, not its
// padding; a latent batch's pixels. And caption dropout belongs to latent datasets: asked of a motion one, it
// is one error naming the folder.
TEST(DatasetFormats, ItemsAreValidFramesAndLatentPixels) {
  ScratchDir motion_dir("items-motion");
  synth_small(motion_dir.path(), "hymotion_tiny", 6);
  const auto motion = open_dataset(motion_dir.path(), {.seq_len = 64});  // longer than every clip: all padded
  const auto& clips = dynamic_cast<const MotionDataset&>(*motion);
  std::vector<Sample> samples;
  int64_t frames = 0;
  for (int64_t i = 0; i < 3; ++i) {
    samples.push_back(motion->get(i, 0));
    frames += clips.clip_frames(i);
  }
  ASSERT_LT(frames, 3 * 64);
  EXPECT_EQ(motion->items_in(collate(samples, false)), frames);
  expect_error([&] { open_dataset(motion_dir.path(), {.seq_len = 64, .caption_dropout = 0.1}); },
               {motion_dir.path(), "data.caption_dropout is for latent datasets"});

  ScratchDir latent_dir("items-latents");
  synth_small(latent_dir.path(), "unet_tiny", 4);
  const auto latents = open_dataset(latent_dir.path());
  const Sample batch = collate({latents->get(0, 0), latents->get(1, 0)}, false);
  const auto& sample = batch.at("sample");
  EXPECT_EQ(latents->items_in(batch), 2 * sample.size(2) * sample.size(3));
}

// What tells the formats apart is one table (data/dataset_formats.cpp): each row's names lead back to it, and
// a family's unknown dataset kind is one error listing the kinds.
TEST(DatasetFormats, OneRowPerFormat) {
  for (const DatasetFormatSpec& spec : dataset_format_specs()) {
    EXPECT_EQ(format_name(spec.format), spec.file_name);
    EXPECT_EQ(dataset_format_of_kind(spec.kind, "model m"), spec.format);
    for (const std::string& name : spec.may_be_zero)
      EXPECT_NE(std::find(spec.required_features.begin(), spec.required_features.end(), name),
                spec.required_features.end()) << name;
  }
  try {
    dataset_format_of_kind("video", "model family 'toy'");
    ADD_FAILURE() << "an unknown dataset kind was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model family 'toy' trains on an unknown dataset format 'video' (known: "
                                         "\"motion\", \"latents\")"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace zest::testing
