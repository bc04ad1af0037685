// EnvSwitch (core/env_switch.h): unset or empty gives the default, "0" is off, anything else on; set() overrides.
#include "core/env_switch.h"

#include <gtest/gtest.h>

#include <cstdlib>

namespace zest {
namespace {

constexpr const char* kVariable = "ZEST_TEST_ENV_SWITCH";

bool read_with(const char* value, bool default_on) {
  if (value == nullptr) ::unsetenv(kVariable);
  else ::setenv(kVariable, value, 1);
  const EnvSwitch on(kVariable, default_on);
  ::unsetenv(kVariable);
  return on.enabled();
}

TEST(EnvSwitch, TheVariableDecidesOnceAndSetOverrides) {
  EXPECT_TRUE(read_with(nullptr, true));
  EXPECT_FALSE(read_with(nullptr, false));
  EXPECT_TRUE(read_with("", true));
  EXPECT_FALSE(read_with("", false));
  EXPECT_FALSE(read_with("0", true));
  EXPECT_TRUE(read_with("1", false));
  EXPECT_TRUE(read_with("yes", false));

  ::setenv(kVariable, "0", 1);
  EnvSwitch on(kVariable, true);
  ::setenv(kVariable, "1", 1);  // read once: a later change does not count
  EXPECT_FALSE(on.enabled());
  on.set(true);
  EXPECT_TRUE(on.enabled());
  ::unsetenv(kVariable);
}

}  // namespace
}  // namespace zest
