// The README's own example run file ("## A run file"), extracted from README.md when the test runs and
// trained verbatim on 2 ranks over data from `zest data synth`: what a new user copies must work.
#include "common/temp_dir.h"
#include "readme_blocks.h"
#include "train/run_config.h"
#include "zest_run.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <string>

namespace zest::testing {
namespace {

namespace fs = std::filesystem;

std::string toml_block_under(const std::string& markdown, const std::string& heading) {
  return fenced_block_under(markdown, heading, "toml");
}

TEST(ReadmeRunFile, ExtractsTheBlockUnderItsHeading) {
  const std::string md = "# x\n## A run file\ntext\n```toml\n[model]\nname = \"m\"\n```\n## Next\n```toml\nb\n```\n";
  EXPECT_EQ(toml_block_under(md, "## A run file"), "[model]\nname = \"m\"\n");
  EXPECT_EQ(toml_block_under("## A run file\nno block\n## Next\n```toml\nb\n```\n", "## A run file"), "");
  EXPECT_EQ(toml_block_under(md, "## Missing"), "");
}

TEST(ReadmeRunFile, TrainsVerbatimOnTwoRanks) {
  const std::string toml = toml_block_under(readme_markdown(), "## A run file");
  ASSERT_FALSE(toml.empty()) << "README.md has no ```toml block under \"## A run file\"";
  const TempDir work("readme");
  const fs::path dir = work.path();
  std::ofstream(dir / "run.toml") << toml;
  const RunConfig config = parse_run_config((dir / "run.toml").string());

  // The run file's own [model] and [data] dir (relative to the working folder, as for a user).
  const auto synth = run_in(dir, zest_binary() + " data synth --config run.toml --samples 64");
  ASSERT_EQ(synth.status, 0) << synth.output;
  const auto train = run_in(dir, zest_binary() + " launch -n 2 -- " + zest_binary() + " train run.toml");
  ASSERT_EQ(train.status, 0) << train.output;

  const fs::path run_dir = dir / config.train.run_dir;
  const auto steps = logged_steps(run_dir / "metrics.jsonl");
  ASSERT_FALSE(steps.empty()) << train.output;
  EXPECT_EQ(steps.back().step, config.train.max_steps);
  for (const LoggedStep& s : steps) EXPECT_TRUE(std::isfinite(s.loss)) << "step " << s.step << "\n" << train.output;
  EXPECT_EQ(steps.back().skipped_total, 0) << train.output;
  if (steps.size() > 1) EXPECT_LT(steps.back().loss, steps.front().loss) << train.output;
  EXPECT_TRUE(fs::exists(dir / config.checkpoint.dir / "latest")) << train.output;
  if (config.checkpoint.merge_at_end) EXPECT_TRUE(fs::exists(run_dir / "model.safetensors")) << train.output;
}

}  // namespace
}  // namespace zest::testing
