// Which activations are recomputed (kernels/recomputed_linear_op.h): ZEST_RECOMPUTE_ACTIVATIONS
// unset recomputes every kind but HY-Motion's single-block GELU; it names every kind, none, or a list;
// anything else is one message naming the variable and what it accepts; set_activation_recompute changes
// one kind without touching the others.
#include "core/check.h"
#include "kernels/recomputed_linear_op.h"

#include <gtest/gtest.h>

#include <vector>

namespace zest {
namespace {

uint32_t bit(RecomputedActivation f) { return 1u << static_cast<uint32_t>(f); }

TEST(RecomputeChoice, TheVariableNamesEveryKindNoneOrAList) {
  const uint32_t every = bit(RecomputedActivation::gelu) | bit(RecomputedActivation::gelu_tanh) |
                         bit(RecomputedActivation::silu) | bit(RecomputedActivation::geglu) |
                         bit(RecomputedActivation::concat_gelu_tanh);
  EXPECT_EQ(parse_recomputed_activations(""), every & ~bit(RecomputedActivation::concat_gelu_tanh));
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

constexpr RecomputedActivation kKinds[] = {RecomputedActivation::gelu, RecomputedActivation::gelu_tanh,
                                           RecomputedActivation::silu, RecomputedActivation::geglu,
                                           RecomputedActivation::concat_gelu_tanh};

TEST(RecomputeChoice, OneKindChangesAlone) {
  std::vector<bool> before;  // the process's choice, restored at the end for the tests after this one
  for (const auto f : kKinds) before.push_back(activation_recompute_enabled(f));
  set_activation_recompute(true);
  set_activation_recompute(RecomputedActivation::concat_gelu_tanh, false);
  EXPECT_FALSE(activation_recompute_enabled(RecomputedActivation::concat_gelu_tanh));
  EXPECT_TRUE(activation_recompute_enabled(RecomputedActivation::gelu_tanh));
  EXPECT_TRUE(activation_recompute_enabled(RecomputedActivation::geglu));
  set_activation_recompute(RecomputedActivation::concat_gelu_tanh, true);
  EXPECT_TRUE(activation_recompute_enabled(RecomputedActivation::concat_gelu_tanh));
  set_activation_recompute(false);
  EXPECT_FALSE(activation_recompute_enabled(RecomputedActivation::gelu));
  for (size_t i = 0; i < before.size(); ++i) set_activation_recompute(kKinds[i], before[i]);
}

}  // namespace
}  // namespace zest
