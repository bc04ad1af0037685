// Crash safety: a child process saving checkpoints back to back is killed with SIGKILL at random
// moments (≥ 20 times, resuming from `latest` each time). After every kill `latest` must name a
// checkpoint that loads (sizes and checksums verified) with exactly the state saved at its step, no
// older than the last save the child reported as finished, and every committed folder must be whole.
// The child is a fork of the test process (an exec would pay LibTorch's start-up for every kill).
#include "ckpt_test_util.h"

#include "checkpoint/verify.h"
#include "comm/self_communicator.h"

#include <gtest/gtest.h>

#include <mpi.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <random>
#include <thread>

namespace zest::testing {
namespace {

constexpr int kKills = 24;

// Three units of 256×256: a save writes ~2.4 MB, long enough for kills to land inside it.
class WideNet : public UnitModule {
 public:
  WideNet() {
    for (int i = 0; i < 3; ++i) register_parameter("w" + std::to_string(i), torch::zeros({256, 256}));
  }
  std::vector<UnitDecl> unit_decls() const override { return {{"u0", {"w0"}}, {"u1", {"w1"}}, {"u2", {"w2"}}}; }
};

std::unique_ptr<Engine> make_wide_engine() {
  EngineConfig ec;
  ec.stage = 1;
  ec.precision = Precision::fp32;
  return std::make_unique<Engine>(std::make_shared<WideNet>(), ec, toy_optim(false), SchedulerConfig{},
                                  std::make_shared<SelfCommunicator>());
}

// The state a checkpoint of `step` must hold: a deterministic function of the step.
void set_state(Engine& engine, int64_t step) {
  torch::NoGradGuard no_grad;
  auto master = engine.master_shard();
  master.copy_(torch::arange(master.numel(), torch::kFloat32) * 1e-3f + static_cast<float>(step));
  for (const auto& [name, t] : engine.optimizer().state_tensors()) t.fill_(static_cast<float>(step) * 0.5f);
  engine.set_step_count(step);
  engine.optimizer().set_step_count(step);
}

bool has_state(Engine& engine, int64_t step) {
  auto expected = make_wide_engine();
  set_state(*expected, step);
  const auto a = engine_state(engine), b = engine_state(*expected);
  for (const auto& [name, t] : a)
    if (!torch::equal(t, b.at(name))) return false;
  return true;
}

checkpoint::SaveRequest wide_request(const std::string& dir) {
  checkpoint::SaveRequest r;
  r.dir = dir;
  r.model_name = "wide";
  r.keep_last = 2;
  return r;
}

// ---- the child (a fork of this process): resume from latest, then save steps forever, reporting each
// finished save on the pipe ----

[[noreturn]] void child_main(const std::string& dir, int report_fd) {
  // Like PyTorch's DataLoader workers: a forked child must not enter OpenMP, whose thread pool did not
  // survive the fork. One thread keeps ATen off the parallel path.
  at::set_num_threads(1);
  try {
    auto engine = make_wide_engine();
    int64_t step = 0;
    if (checkpoint::find_latest(dir)) {
      step = checkpoint::load(*engine, {dir, "wide", "", true}).step;
      ZEST_CHECK(has_state(*engine, step), "resumed state of step ", step, " is wrong");
    }
    while (true) {
      ++step;
      set_state(*engine, step);
      auto request = wide_request(dir);
      request.step = step;
      checkpoint::save(*engine, request);
      const std::string line = std::to_string(step) + "\n";
      ZEST_CHECK(::write(report_fd, line.data(), line.size()) == static_cast<ssize_t>(line.size()), "report");
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "crash-test child: %s\n", e.what());
  }
  ::_exit(3);  // never back into gtest: the parent owns the test
}

// ---- the parent ----

struct Child {
  pid_t pid = -1;
  int report = -1;  // read end of the child's report pipe
};

Child spawn_child(const std::string& dir) {
  int fds[2];
  ZEST_CHECK(::pipe(fds) == 0, "pipe failed");
  std::fflush(nullptr);  // no buffered output may be duplicated into the child
  const pid_t pid = ::fork();
  ZEST_CHECK(pid >= 0, "fork failed");
  if (pid == 0) {
    ::close(fds[0]);
    child_main(dir, fds[1]);
  }
  ::close(fds[1]);
  return {pid, fds[0]};
}

// Reads report lines; returns the last step reported (-1 if none). Waits up to timeout_ms for data.
int64_t read_reports(int fd, std::string& pending, int timeout_ms) {
  int64_t last = -1;
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, timeout_ms) <= 0) return last;
  char buffer[4096];
  const ssize_t n = ::read(fd, buffer, sizeof(buffer));
  if (n <= 0) return last;
  pending.append(buffer, static_cast<size_t>(n));
  size_t newline;
  while ((newline = pending.find('\n')) != std::string::npos) {
    last = std::stoll(pending.substr(0, newline));
    pending.erase(0, newline + 1);
  }
  return last;
}

TEST(CheckpointCrash, SigkillWhileSavingNeverLosesLatest) {
  int mpi_initialized = 0;
  MPI_Initialized(&mpi_initialized);
  if (mpi_initialized) GTEST_SKIP() << "forks; not under mpirun";
  TempDir root;
  const std::string dir = root.sub("ckpt");
  std::mt19937 rng(20261201);
  auto checker = make_wide_engine();
  int64_t committed = 0;  // the newest save any child reported finished
  int inside_save = 0;    // kills that left a step_N.tmp/ or latest.tmp behind
  double save_ms = 20.0;  // refined from the children's pace
  for (int kill = 0; kill < kKills; ++kill) {
    Child child = spawn_child(dir);
    std::string pending;
    int64_t first = -1;
    const auto start = std::chrono::steady_clock::now();
    while (first < 0 && std::chrono::steady_clock::now() - start < std::chrono::seconds(60)) {
      first = read_reports(child.report, pending, 1000);
      int status = 0;
      if (first < 0 && ::waitpid(child.pid, &status, WNOHANG) == child.pid) break;
    }
    ASSERT_GE(first, 0) << "child " << kill << " never finished a save (its error is on stderr)";
    const auto first_at = std::chrono::steady_clock::now();
    committed = std::max(committed, first);
    // A random moment within the next few saves: inside writes, fsyncs, renames, `latest`, retention.
    const double delay_ms = std::uniform_real_distribution<double>(0.0, 3.0 * save_ms)(rng);
    std::this_thread::sleep_for(std::chrono::microseconds(static_cast<int64_t>(delay_ms * 1000)));
    ::kill(child.pid, SIGKILL);
    ::waitpid(child.pid, nullptr, 0);
    const auto killed_at = std::chrono::steady_clock::now();
    int64_t last = first, got;
    while ((got = read_reports(child.report, pending, 0)) >= 0) last = got;
    ::close(child.report);
    if (last > first) {
      save_ms = std::chrono::duration<double, std::milli>(killed_at - first_at).count() / (last - first);
    }
    committed = std::max(committed, last);

    for (const auto& e : std::filesystem::directory_iterator(dir)) {
      const std::string name = e.path().filename().string();
      if (name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0) ++inside_save;
    }
    const auto latest = checkpoint::find_latest(dir);
    ASSERT_TRUE(latest.has_value()) << "kill " << kill << ": no loadable checkpoint left";
    const auto loaded = checkpoint::load(*checker, {dir, "wide", "", true});
    EXPECT_GE(loaded.step, committed) << "kill " << kill << " after " << delay_ms << " ms lost a finished save";
    EXPECT_TRUE(has_state(*checker, loaded.step)) << "kill " << kill << ": step " << loaded.step << " content";
    for (const auto& entry : checkpoint::list_checkpoints(dir)) {  // every committed folder is whole
      const auto m = checkpoint::read_manifest(entry.path);
      for (const auto& f : m.files) EXPECT_TRUE(checkpoint::check_file(entry.path, f, true).ok()) << entry.path;
    }
  }
  EXPECT_GE(committed, kKills);  // every child finished at least one save of its own
  std::printf("[ info ] %d of %d kills interrupted a save (left a .tmp behind); %lld saves committed\n",
              inside_save, kKills, static_cast<long long>(committed));
}

}  // namespace
}  // namespace zest::testing
