// Shared GoogleTest main: sets up the world (MPI under mpirun), lets only rank 0 print results (every rank
// still runs every test; mpirun's exit status fails if any rank fails), and keeps a watchdog that ends the
// process, naming the test, when one test runs longer than its limit: ranks that disagree (one waiting in
// a collective the others never join) then fail the suite in seconds instead of hanging it.
// One program holds several areas (tests/<area>/ folders; tests/CMakeLists.txt): --area=NAME runs only the
// tests defined in tests/NAME/, within whatever --gtest_filter / GTEST_FILTER selects.
#include "comm/world.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

namespace {

// Seconds one test may run: ZEST_TEST_TIMEOUT_S, or 45 (a multi-rank test takes a few seconds on a 2-core
// machine; tests/CMakeLists.txt gives the one-process runs, with their longer fuzz and CLI tests, 120).
int test_time_limit_s() {
  const char* text = std::getenv("ZEST_TEST_TIMEOUT_S");
  if (text == nullptr || *text == '\0') return 45;
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  if (*end != '\0' || value <= 0) {
    std::fprintf(stderr, "ZEST_TEST_TIMEOUT_S = '%s': expected a whole number of seconds > 0\n", text);
    std::exit(2);
  }
  return static_cast<int>(value);
}

class TestWatchdog final : public ::testing::EmptyTestEventListener {
 public:
  TestWatchdog(int rank, int limit_s) : rank_(rank), limit_(limit_s), thread_([this] { watch(); }) {}
  ~TestWatchdog() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }
  TestWatchdog(const TestWatchdog&) = delete;
  TestWatchdog& operator=(const TestWatchdog&) = delete;

  void OnTestStart(const ::testing::TestInfo& info) override {
    std::lock_guard<std::mutex> lock(mutex_);
    test_ = std::string(info.test_suite_name()) + "." + info.name();
    started_ = Clock::now();
  }
  void OnTestEnd(const ::testing::TestInfo&) override {
    std::lock_guard<std::mutex> lock(mutex_);
    test_.clear();
  }

 private:
  using Clock = std::chrono::steady_clock;

  void watch() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stop_) {
      wake_.wait_for(lock, std::chrono::milliseconds(250));
      if (test_.empty() || Clock::now() - started_ < limit_) continue;
      std::fprintf(stderr,
                   "\nrank %d: test %s has run for more than %lld s (ZEST_TEST_TIMEOUT_S): stopping the process. "
                   "A multi-rank test that hangs usually has ranks that disagree (one waits in a collective the "
                   "others never enter).\n",
                   rank_, test_.c_str(), static_cast<long long>(limit_.count()));
      std::fflush(stderr);
      std::_Exit(3);  // no destructors: other threads may be blocked inside a collective
    }
  }

  const int rank_;
  const std::chrono::seconds limit_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::string test_;  // the running test, empty between tests
  Clock::time_point started_;
  bool stop_ = false;
  std::thread thread_;  // last: starts once the members it reads exist
};

// Removes --area=NAME from argv and returns NAME ("" when absent: every test).
std::string take_area_option(int& argc, char** argv) {
  constexpr std::string_view kOption = "--area=";
  std::string area;
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg.substr(0, kOption.size()) == kOption) {
      area = arg.substr(kOption.size());
    } else {
      argv[kept++] = argv[i];
    }
  }
  argc = kept;
  argv[argc] = nullptr;
  return area;
}

// The folder directly above a test's source file: its area (the path may be absolute or relative).
std::string_view area_of(std::string_view file) {
  const size_t slash = file.rfind('/');
  if (slash == std::string_view::npos) return {};
  const std::string_view folder = file.substr(0, slash);
  return folder.substr(folder.rfind('/') + 1);  // npos + 1 == 0: a folder without a parent
}

// gtest's filter patterns: '*' matches any run of characters, '?' any one character.
bool pattern_matches(std::string_view pattern, std::string_view name) {
  size_t p = 0, n = 0, star = std::string_view::npos, resume = 0;
  while (n < name.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == name[n])) {
      ++p, ++n;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++, resume = n;
    } else if (star != std::string_view::npos) {
      p = star + 1, n = ++resume;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

bool any_pattern_matches(std::string_view patterns, std::string_view name) {
  while (true) {
    const size_t colon = patterns.find(':');
    if (pattern_matches(patterns.substr(0, colon), name)) return true;
    if (colon == std::string_view::npos) return false;
    patterns.remove_prefix(colon + 1);
  }
}

// gtest's filter: POSITIVE[-NEGATIVE], ':'-separated patterns; no positive pattern means '*'.
bool filter_selects(std::string_view filter, std::string_view name) {
  const size_t dash = filter.find('-');
  const std::string_view positive = filter.substr(0, dash);
  if (!any_pattern_matches(positive.empty() ? "*" : positive, name)) return false;
  return dash == std::string_view::npos || !any_pattern_matches(filter.substr(dash + 1), name);
}

// Narrows the test filter to the tests of `area` it selects, naming whole suites where it can (gtest prints
// the filter). Returns false when the program has no test in that area: a misspelt area must not pass as an
// empty run.
bool select_area(const std::string& area) {
  const auto& unit = *::testing::UnitTest::GetInstance();
  const std::string given = GTEST_FLAG_GET(filter);
  std::string filter;
  bool found = false;
  for (int s = 0; s < unit.total_test_suite_count(); ++s) {
    const auto& suite = *unit.GetTestSuite(s);
    std::string names;  // the suite's selected tests
    int selected = 0;
    for (int t = 0; t < suite.total_test_count(); ++t) {
      const auto& info = *suite.GetTestInfo(t);
      if (area_of(info.file()) != area) continue;
      found = true;
      const std::string name = std::string(info.test_suite_name()) + "." + info.name();
      if (!filter_selects(given, name)) continue;
      names += ":" + name;
      ++selected;
    }
    if (selected == suite.total_test_count()) names = std::string(":") + suite.name() + ".*";
    if (selected > 0) filter += names;
  }
  if (!found) return false;
  GTEST_FLAG_SET(filter, filter.empty() ? "-*" : filter.substr(1));
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string area = take_area_option(argc, argv);
  zest::WorldGuard world;
  ::testing::InitGoogleTest(&argc, argv);
  if (!area.empty() && !select_area(area)) {
    std::fprintf(stderr, "--area=%s: this program has no tests in tests/%s/\n", area.c_str(), area.c_str());
    return 2;
  }
  auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
  if (world.rank() != 0) delete listeners.Release(listeners.default_result_printer());  // gtest owns its listeners
  auto* watchdog = new TestWatchdog(world.rank(), test_time_limit_s());
  listeners.Append(watchdog);
  const int result = RUN_ALL_TESTS();
  delete listeners.Release(watchdog);  // stops its thread before the world is torn down
  return result;
}
