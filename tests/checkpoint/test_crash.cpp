// Crash safety, deterministically. A child process (a fork of this test) resumes from `latest` and saves;
// a save-phase hook (checkpoint/save_phase.h) stops it at one named moment inside a save, where the
// parent kills it with SIGKILL. Every phase is hit, in synchronous saves on 1 and 2 ranks and in
// asynchronous saves on 2 ranks, both in a save of a new step and in one that replaces the folder of
// the same step. After each kill: the kill landed inside the save (the child said so from the hook, and
// the folder shows that phase's traces), `latest` loads with exactly the state of the expected step
// (the new one once `latest` was renamed, the previous one before), and every committed folder passes
// the checks of `zest ckpt inspect --verify`. The next child resumes from what the kill left.
// The child is a fork of the test process (an exec would pay LibTorch's start-up for every kill).
#include "ckpt_test_util.h"
#include "thread_world.h"

#include "formats/safetensors.h"
#include "checkpoint/save_phase.h"
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
#include <fstream>

namespace zest::testing {
namespace {
namespace fs = std::filesystem;
using checkpoint::SavePhase;

constexpr int kKeepLast = 2;

// Three units of 64×64 (sizes do not matter: the hook, not timing, decides where a kill lands).
class WideNet : public UnitModule {
 public:
  WideNet() {
    for (int i = 0; i < 3; ++i) register_parameter("w" + std::to_string(i), torch::zeros({64, 64}));
  }
  std::vector<UnitDecl> unit_decls() const override { return {{"u0", {"w0"}}, {"u1", {"w1"}}, {"u2", {"w2"}}}; }
};

std::unique_ptr<Engine> make_wide_engine(std::shared_ptr<Communicator> comm) {
  EngineConfig ec;
  ec.stage = 1;
  ec.precision = Precision::fp32;
  return std::make_unique<Engine>(std::make_shared<WideNet>(), ec, toy_optim(false), SchedulerConfig{},
                                  std::move(comm));
}

// The state a checkpoint of `step` holds, for this rank's shard: [master, then each optimizer state].
// A function of the step and of each element's position in its unit (not in the rank's shard), so that
// it reads the same at any world size. Padding stays zero.
std::vector<torch::Tensor> state_of_step(Engine& engine, int64_t step) {
  std::vector<torch::Tensor> flats(1 + engine.optimizer().state_tensors().size());
  for (auto& flat : flats) flat = torch::zeros_like(engine.master_shard());
  for (size_t u = 0; u < engine.units().size(); ++u) {
    const ElementSpan owned = engine.units()[u].owned();
    const auto position = torch::arange(owned.begin, owned.end(), torch::kFloat32);
    const auto real = position < static_cast<double>(engine.units()[u].layout().numel);
    const auto values = (position * 1e-3f + static_cast<float>(step) + 100.0f * static_cast<float>(u)) * real;
    for (size_t k = 0; k < flats.size(); ++k)
      flats[k].narrow(0, engine.units()[u].in_flat().begin, owned.numel).copy_(values * (1.0f / (1 + k)));
  }
  return flats;
}

std::vector<torch::Tensor> flats_of(Engine& engine) {
  std::vector<torch::Tensor> flats = {engine.master_shard()};
  for (const auto& [name, t] : engine.optimizer().state_tensors()) flats.push_back(t);
  return flats;
}

void set_state(Engine& engine, int64_t step) {
  EngineState state = engine.state();  // master, then each optimizer state: state_of_step's order
  const auto values = state_of_step(engine, step);
  for (size_t k = 0; k < values.size(); ++k) state.shards[k].flat = values[k];
  state.counters.step = step;
  state.counters.optimizer_step = step;
  engine.load_state(state);
}

bool has_state(Engine& engine, int64_t step) {
  const auto expected = state_of_step(engine, step);
  const auto flats = flats_of(engine);
  for (size_t k = 0; k < flats.size(); ++k)
    if (!torch::equal(flats[k], expected[k])) return false;
  return engine.step_count() == step && engine.optimizer().step_count() == step;
}

checkpoint::SaveRequest wide_request(const std::string& dir, int64_t step, bool async) {
  checkpoint::SaveRequest r;
  r.dir = dir;
  r.model_name = "wide";
  r.keep_last = kKeepLast;
  r.step = step;
  r.async = async;
  return r;
}

struct Mode {
  int world = 1;
  bool async = false;
};

// Where a child stops: the save of `step`, at `phase`, on `rank`'s thread.
struct Target {
  SavePhase phase = SavePhase::tmp_created;
  int rank = 0;
  int64_t step = 0;
};

// ---- the child (a fork of this process) ----

Target g_target;
int g_report_fd = -1;

void report(const std::string& line) {
  const std::string text = line + "\n";
  if (::write(g_report_fd, text.data(), text.size()) != static_cast<ssize_t>(text.size())) ::_exit(5);
}

// The hook: at the target, tell the parent and wait to be killed.
void stop_at_target(SavePhase phase, int rank, int64_t step) {
  if (phase != g_target.phase || rank != g_target.rank || step != g_target.step) return;
  report(std::string("HIT ") + checkpoint::to_string(phase));
  while (true) ::pause();
}

// Resumes, saves the resumed step again (replacing its folder), then the next steps.
void child_rank(const std::string& dir, const Mode& mode, std::shared_ptr<Communicator> comm) {
  auto engine = make_wide_engine(comm);
  const int64_t resumed = checkpoint::load(*engine, {dir, "wide", "", true}).step;
  ZEST_CHECK(has_state(*engine, resumed), "resumed state of step ", resumed, " is wrong");
  checkpoint::Saver saver;
  for (int64_t step = resumed; step < resumed + 3; ++step) {
    set_state(*engine, step);
    saver.save(*engine, wide_request(dir, step, mode.async));
    if (mode.async) set_state(*engine, step + 1000);  // the save must have copied the state
    saver.wait(*comm);
    if (comm->rank() == 0) report("SAVED " + std::to_string(step));
  }
}

[[noreturn]] void child_main(const std::string& dir, const Mode& mode, const Target& target, int report_fd) {
  // Like PyTorch's DataLoader workers: a forked child must not enter OpenMP, whose thread pool did not
  // survive the fork. One thread keeps ATen off the parallel path.
  at::set_num_threads(1);
  g_target = target;
  g_report_fd = report_fd;
  checkpoint::set_save_phase_hook(&stop_at_target);
  try {
    run_ranks(mode.world, [&](int, std::shared_ptr<Communicator> comm) { child_rank(dir, mode, comm); });
  } catch (const std::exception& e) {
    std::fprintf(stderr, "crash-test child: %s\n", e.what());
    ::_exit(3);
  }
  ::_exit(4);  // never back into gtest: the parent owns the test. 4: the target was never reached
}

// ---- the parent ----

// Runs a child until it reports reaching the target (true) or exits (false); kills it either way.
bool run_child_to(const std::string& dir, const Mode& mode, const Target& target, std::string& log) {
  int fds[2];
  ZEST_CHECK(::pipe(fds) == 0, "pipe failed");
  std::fflush(nullptr);  // no buffered output may be duplicated into the child
  const pid_t pid = ::fork();
  ZEST_CHECK(pid >= 0, "fork failed");
  if (pid == 0) {
    ::close(fds[0]);
    child_main(dir, mode, target, fds[1]);
  }
  ::close(fds[1]);
  bool hit = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  char buffer[256];
  while (!hit && std::chrono::steady_clock::now() < deadline) {
    pollfd p{fds[0], POLLIN, 0};
    if (::poll(&p, 1, 1000) <= 0) continue;
    const ssize_t n = ::read(fds[0], buffer, sizeof(buffer));
    if (n <= 0) break;  // the child exited without reaching the target
    log.append(buffer, static_cast<size_t>(n));
    hit = log.find("HIT ") != std::string::npos;
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  ::close(fds[0]);
  return hit;
}

std::string latest_text(const std::string& dir) {
  std::ifstream in(dir + "/latest");
  std::string name;
  std::getline(in, name);
  return name;
}

bool any_entry_ending(const std::string& dir, const std::string& suffix) {
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
      return true;
  }
  return false;
}

bool opens_as_safetensors(const std::string& path) {
  try {
    safetensors::Reader reader(path);
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

// What the folder must show when the save of `step` was killed at `phase`: proof that the kill landed
// inside the save, at that moment. An empty string when it does.
std::string missing_traces(const std::string& dir, const Target& t) {
  const std::string name = checkpoint::step_dir_name(t.step);
  const std::string final_dir = dir + "/" + name, tmp = final_dir + ".tmp";
  const std::string rank_file = tmp + "/" + checkpoint::rank_file_name(t.rank);
  switch (t.phase) {
    case SavePhase::tmp_created:
      return fs::is_directory(tmp) && fs::is_empty(tmp) ? "" : "no empty " + tmp;
    case SavePhase::rank_file_partial:
      return fs::exists(rank_file) && !opens_as_safetensors(rank_file) ? "" : "no partial " + rank_file;
    case SavePhase::rank_file_written:
      return opens_as_safetensors(rank_file) && !fs::exists(tmp + "/manifest.json") ? "" : "no complete " + rank_file;
    case SavePhase::manifest_written:
      return fs::exists(tmp + "/manifest.json") ? "" : "no manifest in " + tmp;
    case SavePhase::old_step_moved:
      return fs::exists(final_dir + ".old") && !fs::exists(final_dir) ? "" : "no " + final_dir + ".old alone";
    case SavePhase::step_renamed:
      return fs::exists(final_dir + "/manifest.json") && !fs::exists(tmp) && !fs::exists(dir + "/latest.tmp")
                 ? "" : "no committed " + final_dir + " before latest.tmp";
    case SavePhase::latest_tmp_written:
      return fs::exists(dir + "/latest.tmp") ? "" : "no latest.tmp";
    case SavePhase::latest_renamed:
      return latest_text(dir) == name && !fs::exists(dir + "/latest.tmp") ? "" : "latest does not name " + name;
    case SavePhase::retention_moved:
      return any_entry_ending(dir, ".del") ? "" : "no step_M.del being removed";
  }
  return "unknown phase";
}

bool commits_new_step(SavePhase phase) {
  return phase == SavePhase::latest_renamed || phase == SavePhase::retention_moved;
}

bool is_rank_phase(SavePhase phase) {
  return phase == SavePhase::rank_file_partial || phase == SavePhase::rank_file_written;
}

// Every (phase, rank, replacing?) a save of `mode` passes through.
std::vector<std::pair<Target, bool>> targets_of(const Mode& mode) {
  std::vector<std::pair<Target, bool>> out;
  for (const SavePhase phase : checkpoint::kAllSavePhases) {
    for (int rank = 0; rank < (is_rank_phase(phase) ? mode.world : 1); ++rank) {
      for (const bool replacing : {true, false}) {
        if (phase == SavePhase::old_step_moved && !replacing) continue;  // only a same-step save moves one
        if (phase == SavePhase::retention_moved && replacing) continue;  // replacing adds no checkpoint
        out.push_back({Target{phase, rank, 0}, replacing});
      }
    }
  }
  return out;
}

void kill_at_every_phase(const Mode& mode, int& kills) {
  TempDir root("crash");
  const std::string dir = root.sub("ckpt");
  run_ranks(mode.world, [&](int, std::shared_ptr<Communicator> comm) {  // steps 1 and 2: retention has work
    auto engine = make_wide_engine(comm);
    for (int64_t step : {1, 2}) {
      set_state(*engine, step);
      checkpoint::save(*engine, wide_request(dir, step, false));
    }
  });
  auto checker = make_wide_engine(std::make_shared<SelfCommunicator>());
  int64_t latest = 2;
  for (auto [target, replacing] : targets_of(mode)) {
    target.step = replacing ? latest : latest + 1;
    const std::string what = str(mode.world, " rank(s), ", mode.async ? "async" : "sync", ", ",
                                 checkpoint::to_string(target.phase), " on rank ", target.rank, " saving step ",
                                 target.step, replacing ? " again" : "");
    std::string log;
    ASSERT_TRUE(run_child_to(dir, mode, target, log)) << what << ": never reached (child output: " << log << ")";
    ++kills;
    EXPECT_EQ(missing_traces(dir, target), "") << what << ": the kill did not land inside the save";
    ASSERT_TRUE(checkpoint::find_latest(dir).has_value()) << what << ": no loadable checkpoint left";
    const auto loaded = checkpoint::load(*checker, {dir, "wide", "", true});
    const int64_t expected = commits_new_step(target.phase) ? target.step : latest;
    EXPECT_EQ(loaded.step, expected) << what;
    EXPECT_TRUE(has_state(*checker, loaded.step)) << what << ": step " << loaded.step << " content";
    for (const auto& entry : checkpoint::list_checkpoints(dir)) {  // every committed folder is whole
      const auto report = checkpoint::inspect_checkpoint(entry.path, /*hash=*/true);
      for (size_t r = 0; r < report.files.size(); ++r)
        EXPECT_TRUE(report.files[r].ok()) << what << ": " << report.files[r].problem(report.manifest.files[r]);
    }
    latest = loaded.step;
  }
}

bool forking_allowed() {
  int mpi_initialized = 0;
  MPI_Initialized(&mpi_initialized);
  return !mpi_initialized;
}

TEST(CheckpointCrash, SigkillAtEveryPhaseOfASyncSaveOnOneRank) {
  if (!forking_allowed()) GTEST_SKIP() << "forks; not under mpirun";
  int kills = 0;
  kill_at_every_phase({1, false}, kills);
  std::printf("[ info ] %d kills, each inside a save at a known phase\n", kills);
}

TEST(CheckpointCrash, SigkillAtEveryPhaseOfASyncSaveOnTwoRanks) {
  if (!forking_allowed()) GTEST_SKIP() << "forks; not under mpirun";
  int kills = 0;
  kill_at_every_phase({2, false}, kills);
  std::printf("[ info ] %d kills, each inside a save at a known phase\n", kills);
}

TEST(CheckpointCrash, SigkillAtEveryPhaseOfAnAsyncSaveOnTwoRanks) {
  if (!forking_allowed()) GTEST_SKIP() << "forks; not under mpirun";
  int kills = 0;
  kill_at_every_phase({2, true}, kills);
  std::printf("[ info ] %d kills, each inside a save at a known phase\n", kills);
}

}  // namespace
}  // namespace zest::testing
