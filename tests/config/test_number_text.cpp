// The strict number reader behind command-line options and environment variables: the whole text or
// nothing, and a timeout variable that is not a positive number of seconds named in one message; memory
// sizes as messages print them; whole writes to a file descriptor.
#include "core/check.h"
#include "core/fd_write.h"
#include "core/number_text.h"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <string>

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

TEST(NumberText, GigabytesAreDecimalWithOneDecimal) {
  EXPECT_EQ(gigabytes_text(0), "0.0 GB");
  EXPECT_EQ(gigabytes_text(12'345'678'901), "12.3 GB");
  EXPECT_EQ(gigabytes_text(999'999'999), "1.0 GB");
  EXPECT_EQ(gigabytes_text(-2'000'000'000), "-2.0 GB");
}

TEST(FdWrite, WritesEverythingAndReportsAClosedReader) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const std::string text(10'000, 'z');  // more than one small write may take
  EXPECT_TRUE(write_all(fds[1], text));
  std::string read_back(text.size(), '\0');
  size_t done = 0;
  while (done < read_back.size()) {
    const ssize_t n = ::read(fds[0], read_back.data() + done, read_back.size() - done);
    ASSERT_GT(n, 0);
    done += static_cast<size_t>(n);
  }
  EXPECT_EQ(read_back, text);
  ::close(fds[0]);
  const auto previous = std::signal(SIGPIPE, SIG_IGN);  // a closed reader is an error, not a signal
  EXPECT_FALSE(write_all(fds[1], "x"));
  EXPECT_EQ(errno, EPIPE);
  std::signal(SIGPIPE, previous);
  ::close(fds[1]);
}

TEST(FdWrite, AFullDeviceIsNoSpace) {
  const int fd = ::open("/dev/full", O_WRONLY);
  ASSERT_GE(fd, 0);
  errno = 0;
  EXPECT_FALSE(write_all(fd, "a line\n"));
  EXPECT_EQ(errno, ENOSPC) << "the reason a caller reports";
  ::close(fd);
}

}  // namespace
}  // namespace zest::testing
