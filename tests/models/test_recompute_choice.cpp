// Which activations are recomputed (models/common/recomputed_linear_op.h): ZEST_RECOMPUTE_ACTIVATIONS
// names every kind, none, or a list; anything else is one message naming the variable and what it accepts;
// set_activation_recompute changes one kind without touching the others.
#include "core/check.h"
#include "models/common/recomputed_linear_op.h"

#include <gtest/gtest.h>

namespace zest {
namespace {

uint32_t bit(RecomputedActivation f) { return 1u << static_cast<uint32_t>(f); }

TEST(RecomputeChoice, TheVariableNamesEveryKindNoneOrAList) {
  const uint32_t every = bit(RecomputedActivation::gelu) | bit(RecomputedActivation::gelu_tanh) |
                         bit(RecomputedActivation::silu) | bit(RecomputedActivation::geglu) |
                         bit(RecomputedActivation::concat_gelu_tanh);
  EXPECT_EQ(parse_recomputed_activations(""), every);
  EXPECT_EQ(parse_recomputed_activations("1"), every);
  EXPECT_EQ(parse_recomputed_activations("0"), 0u);
  EXPECT_EQ(parse_recomputed_activations("gelu_tanh,geglu"),
            bit(RecomputedActivation::gelu_tanh) | bit(RecomputedActivation::geglu));
  EXPECT_EQ(parse_recomputed_activations("concat_gelu_tanh"), bit(RecomputedActivation::concat_gelu_tanh));
  try {
    parse_recomputed_activations("gelu,swish");
    FAIL() << "an unknown kind was accepted";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("ZEST_RECOMPUTE_ACTIVATIONS=gelu,swish"), std::string::npos) << message;
    EXPECT_NE(message.find("\"swish\""), std::string::npos) << message;
    EXPECT_NE(message.find("concat_gelu_tanh"), std::string::npos) << message;
  }
}

TEST(RecomputeChoice, OneKindChangesAlone) {
  set_activation_recompute(true);
  set_activation_recompute(RecomputedActivation::concat_gelu_tanh, false);
  EXPECT_FALSE(activation_recompute_enabled(RecomputedActivation::concat_gelu_tanh));
  EXPECT_TRUE(activation_recompute_enabled(RecomputedActivation::gelu_tanh));
  EXPECT_TRUE(activation_recompute_enabled(RecomputedActivation::geglu));
  set_activation_recompute(RecomputedActivation::concat_gelu_tanh, true);
  EXPECT_TRUE(activation_recompute_enabled(RecomputedActivation::concat_gelu_tanh));
  set_activation_recompute(false);
  EXPECT_FALSE(activation_recompute_enabled(RecomputedActivation::gelu));
  set_activation_recompute(true);
}

}  // namespace
}  // namespace zest
