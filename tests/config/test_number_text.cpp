// The strict number reader behind command-line options and environment variables: the whole text or
// nothing, and a timeout variable that is not a positive number of seconds named in one message.
#include "core/check.h"
#include "core/number_text.h"

#include <gtest/gtest.h>

#include <cstdlib>

namespace zest::testing {
namespace {

TEST(NumberText, TakesTheWholeTextOrNothing) {
  EXPECT_EQ(number_in("7000000000"), 7e9);
  EXPECT_EQ(number_in("1.5e9"), 1.5e9);
  EXPECT_EQ(number_in("-0.25"), -0.25);
  for (const char* bad : {"", "12abc", "1e9 ", "inf", "nan", "e9", "--1"}) {
    EXPECT_FALSE(number_in(bad).has_value()) << "'" << bad << "'";
  }
}

TEST(NumberText, EnvironmentSecondsInMilliseconds) {
  const char* name = "ZEST_TEST_NUMBER_TEXT_S";
  ::unsetenv(name);
  EXPECT_FALSE(env_seconds_in_ms(name).has_value());
  ::setenv(name, "", 1);
  EXPECT_FALSE(env_seconds_in_ms(name).has_value()) << "empty is unset";
  ::setenv(name, "2.5", 1);
  EXPECT_EQ(env_seconds_in_ms(name), 2500);
  for (const char* bad : {"0", "-3", "ten", "5s"}) {
    ::setenv(name, bad, 1);
    try {
      (void)env_seconds_in_ms(name);
      ADD_FAILURE() << "'" << bad << "' was taken";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), std::string("environment variable ") + name + "='" + bad +
                                           "' must be a positive number of seconds");
    }
  }
  ::unsetenv(name);
}

}  // namespace
}  // namespace zest::testing
