// The loader side of prepared image datasets: the grouped sampler (aspect-ratio buckets: every rank's
// batch from one bucket, every sample in every epoch, resumable positions) and caption dropout to the
// empty prompt's embedding (seeded, at the configured rate); [data] caption_dropout's bounds.
#include "formats/safetensors.h"
#include "common/temp_dir.h"
#include "core/check.h"
#include "core/config_reader.h"
#include "data/data_config.h"
#include "data/dataset.h"
#include "data/latent_dataset.h"
#include "data/sampler.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

namespace zest {
namespace {

TEST(GroupedSampler, EveryRankBatchFromOneGroupAndEverySampleEachEpoch) {
  // 23 samples in 3 groups of 11, 9 and 3.
  std::vector<int64_t> groups;
  for (int i = 0; i < 23; ++i) groups.push_back(i < 11 ? 0 : i < 20 ? 1 : 2);
  for (int world : {1, 2, 3}) {
    SamplerOptions o;
    o.seed = 5;
    o.groups = groups;
    o.group_batch = 2;
    std::vector<DistributedSampler> ranks;
    for (int r = 0; r < world; ++r) ranks.emplace_back(23, r, world, o);
    const int64_t block = 2 * world;
    const int64_t blocks = (11 + block - 1) / block + (9 + block - 1) / block + (3 + block - 1) / block;
    EXPECT_EQ(ranks[0].samples_per_rank(), blocks * 2) << world;
    EXPECT_EQ(ranks[0].global_epoch_size(), blocks * block);
    for (int64_t epoch = 0; epoch < 3; ++epoch) {
      std::set<int64_t> seen;
      for (int r = 0; r < world; ++r) {
        const auto mine = ranks[r].epoch_indices(epoch);
        for (size_t k = 0; k < mine.size(); k += 2) EXPECT_EQ(groups[mine[k]], groups[mine[k + 1]]) << "world " << world;
        seen.insert(mine.begin(), mine.end());
      }
      EXPECT_EQ(seen.size(), 23u) << "world " << world << " epoch " << epoch;
    }
    EXPECT_NE(ranks[0].epoch_indices(0), ranks[0].epoch_indices(1));  // reshuffled each epoch
  }
  // A position past the dataset size but inside the padded epoch resumes.
  SamplerOptions o;
  o.groups = groups;
  o.group_batch = 4;
  DistributedSampler s(23, 0, 1, o);
  EXPECT_EQ(s.global_epoch_size(), 28);
  EXPECT_EQ(s.from_global({0, 24}), (SamplerPosition{0, 24}));
}

namespace fs = std::filesystem;

// A 40-sample latent dataset whose text states are all 1 and whose empty prompt is all 0.
std::string write_dataset(const testing::TempDir& dir, bool with_empty_prompt) {
  const std::string d = dir.sub("ds");
  fs::create_directories(d);
  safetensors::save_file(d + "/shard.safetensors", {{"latents", torch::zeros({40, 4, 2, 2})},
                                                     {"text_embeds_seq", torch::ones({40, 3, 5})},
                                                     {"pooled", torch::ones({40, 2})}});
  DatasetManifest m;
  m.format = DatasetFormat::latents;
  m.features = {{"channels", 4}, {"height", 2}, {"width", 2}, {"text_tokens", 3}, {"text_dim", 5}, {"pooled_dim", 2}, {"time_ids", 0}};
  m.shards = {{"shard.safetensors", 40}};
  if (with_empty_prompt) {
    safetensors::save_file(d + "/empty.safetensors", {{"text_embeds_seq", torch::zeros({3, 5})}, {"pooled", torch::zeros({2})}});
    m.empty_prompt_file = "empty.safetensors";
  }
  write_manifest(d, m);
  return d;
}

TEST(CaptionDropout, SeededAtTheConfiguredRate) {
  const testing::TempDir dir("dropout");
  const std::string d = write_dataset(dir, true);
  DatasetOptions o;
  o.caption_dropout = 0.25;
  const auto dataset = open_dataset(d, o);
  int dropped = 0;
  for (uint64_t seed = 0; seed < 400; ++seed) {
    const Sample s = dataset->get(static_cast<int64_t>(seed % 40), seed);
    const bool empty = s.at("encoder_hidden_states").sum().item<float>() == 0;
    EXPECT_EQ(empty, s.at("text_embeds").sum().item<float>() == 0);  // both conditions together
    EXPECT_TRUE(torch::equal(s.at("encoder_hidden_states"), dataset->get(static_cast<int64_t>(seed % 40), seed).at("encoder_hidden_states")));
    dropped += empty;
  }
  EXPECT_GT(dropped, 70);
  EXPECT_LT(dropped, 130);
  const auto plain = open_dataset(d);
  for (uint64_t seed = 0; seed < 50; ++seed) EXPECT_EQ(plain->get(0, seed).at("encoder_hidden_states").sum().item<float>(), 15);
}

TEST(CaptionDropout, NeedsTheEmptyPrompt) {
  const testing::TempDir dir("dropout_missing");
  const std::string d = write_dataset(dir, false);
  DatasetOptions o;
  o.caption_dropout = 0.1;
  try {
    open_dataset(d, o);
    FAIL() << "opened";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("names no \"empty_prompt\" file"), std::string::npos) << e.what();
  }
}

TEST(CaptionDropout, ConfigBounds) {
  for (const char* bad : {"-0.1", "1.5"}) {
    ConfigTable table = ConfigTable::parse_string(std::string("dir = \"d\"\ncaption_dropout = ") + bad + "\n", "run.toml");
    EXPECT_THROW(DataConfig::from_toml(table), Error) << bad;
  }
  ConfigTable table = ConfigTable::parse_string("dir = \"d\"\ncaption_dropout = 0.1\n", "run.toml");
  EXPECT_DOUBLE_EQ(DataConfig::from_toml(table).caption_dropout, 0.1);
}

}  // namespace
}  // namespace zest
