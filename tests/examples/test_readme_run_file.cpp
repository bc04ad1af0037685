// The README's own example run file ("## A run file"), extracted from README.md when the test runs and
// trained verbatim on 2 ranks over data from `zest data synth`: what a new user copies must work.
#include "common/read_text.h"
#include "common/temp_dir.h"
#include "train/run_config.h"
#include "zest_run.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>
#include <string>

namespace zest::testing {
namespace {

namespace fs = std::filesystem;

std::string readme_read_text(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The body of the first ```toml block after the line `heading`, or "" when there is none before the
// next "## " heading.
std::string toml_block_under(const std::string& markdown, const std::string& heading) {
  const size_t at = markdown.find("\n" + heading + "\n");
  if (at == std::string::npos) return "";
  const size_t section_end = markdown.find("\n## ", at + heading.size() + 1);
  const std::string fence = "\n```toml\n";
  const size_t open = markdown.find(fence, at);
  if (open == std::string::npos || open > section_end) return "";
  const size_t body = open + fence.size();
  const size_t close = markdown.find("\n```", body);
  if (close == std::string::npos) return "";
  return markdown.substr(body, close - body + 1);
}

TEST(ReadmeRunFile, ExtractsTheBlockUnderItsHeading) {
  const std::string md = "# x\n## A run file\ntext\n```toml\n[model]\nname = \"m\"\n```\n## Next\n```toml\nb\n```\n";
  EXPECT_EQ(toml_block_under(md, "## A run file"), "[model]\nname = \"m\"\n");
  EXPECT_EQ(toml_block_under("## A run file\nno block\n## Next\n```toml\nb\n```\n", "## A run file"), "");
  EXPECT_EQ(toml_block_under(md, "## Missing"), "");
}

TEST(ReadmeRunFile, TrainsVerbatimOnTwoRanks) {
  const std::string toml = toml_block_under(readme_read_text(fs::path(ZEST_SOURCE_DIR) / "README.md"), "## A run file");
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
