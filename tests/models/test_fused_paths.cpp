// The fused-path record (kernels/fused_paths.h): counts, the first reason kept, one line per path
// that fell back and none for a path always taken.
#include "kernels/fused_paths.h"

#include <gtest/gtest.h>

namespace zest {
namespace {

TEST(FusedPaths, CountsDecisionsAndKeepsTheFirstReason) {
  reset_fused_path_uses();
  note_fused_path("qk_norm_rope", true);
  note_fused_path("rms_norm", false, "head dim 300 not covered");
  note_fused_path("qk_norm_rope", false, "head dim 300 not covered (8 to 256)");
  note_fused_path("qk_norm_rope", false, "a later reason");
  note_fused_path("rms_norm", false);
  const auto uses = fused_path_uses();
  ASSERT_EQ(uses.size(), 2u);
  EXPECT_EQ(uses[0].path, "qk_norm_rope");
  EXPECT_EQ(uses[0].taken, 1);
  EXPECT_EQ(uses[0].fell_back, 2);
  EXPECT_EQ(uses[0].why_not, "head dim 300 not covered (8 to 256)");
  EXPECT_EQ(uses[1].path, "rms_norm");
  EXPECT_EQ(uses[1].taken, 0);
  EXPECT_EQ(uses[1].fell_back, 2);
  EXPECT_EQ(uses[1].why_not, "head dim 300 not covered");
  const auto lines = fused_path_fallback_lines();
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0], "fused path qk_norm_rope not used (2 of 3 coverage checks): head dim 300 not covered (8 to 256)");
  EXPECT_EQ(lines[1], "fused path rms_norm not used (2 of 2 coverage checks): head dim 300 not covered");
  reset_fused_path_uses();
  EXPECT_TRUE(fused_path_uses().empty());
}

TEST(FusedPaths, APathAlwaysTakenSaysNothing) {
  reset_fused_path_uses();
  note_fused_path("gated_residual", true);
  note_fused_path("gated_residual", true);
  EXPECT_TRUE(fused_path_fallback_lines().empty());
  ASSERT_EQ(fused_path_uses().size(), 1u);
  EXPECT_EQ(fused_path_uses()[0].taken, 2);
  reset_fused_path_uses();
}

// A fallback with no reason given still says something.
TEST(FusedPaths, AFallbackWithoutAReasonIsNamedNotCovered) {
  reset_fused_path_uses();
  note_fused_path("geglu", false);
  ASSERT_EQ(fused_path_fallback_lines().size(), 1u);
  EXPECT_EQ(fused_path_uses()[0].why_not, "not covered");
  reset_fused_path_uses();
}

}  // namespace
}  // namespace zest
