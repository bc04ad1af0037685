// Shared GoogleTest main: sets up the world (MPI under mpirun), lets only rank 0 print results (every rank
// still runs every test; mpirun's exit status fails if any rank fails), and keeps a watchdog that ends the
// process, naming the test, when one test runs longer than its limit: ranks that disagree (one waiting in
// a collective the others never join) then fail the suite in seconds instead of hanging it.
#include "comm/world.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
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

}  // namespace

int main(int argc, char** argv) {
  zest::WorldGuard world;
  ::testing::InitGoogleTest(&argc, argv);
  auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
  if (world.rank() != 0) delete listeners.Release(listeners.default_result_printer());  // gtest owns its listeners
  auto* watchdog = new TestWatchdog(world.rank(), test_time_limit_s());
  listeners.Append(watchdog);
  const int result = RUN_ALL_TESTS();
  delete listeners.Release(watchdog);  // stops its thread before the world is torn down
  return result;
}
