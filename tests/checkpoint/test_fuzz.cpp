// Seeded fuzz test of everything that reads a checkpoint. 240 mutated copies of a 2-rank checkpoint
// (every other round through the categories one that holds an EMA of the weights too; fuzz_mutations.h:
// manifest fields deleted / retyped / out of range, layout lies, bad checksums, damaged text, rank-file
// bytes flipped in header and data, rewritten identities, missing / extra / swapped / truncated /
// duplicated / foreign files, `latest` pointing nowhere) each go through
// `ckpt inspect --verify`, merge and a resume into 2-rank engines, in process; a sample also through the
// CLI. Every case must end in OK or a zest::Error that names the checkpoint, within a time bound (a
// watchdog aborts a hang), and:
//  - an OK merge or resume gives exactly the original weights of the step it reports (never different
//    weights), a refused resume leaves the engine untouched;
//  - inspect --verify and merge agree, and a resume succeeds only where inspect --verify does;
//  - damage is refused by all three, harmless changes (extra files, a dangling `latest`) accepted.
// Counts per category are printed.
#include "ckpt_test_util.h"
#include "fuzz_mutations.h"
#include "thread_world.h"

#include "formats/safetensors.h"
#include "checkpoint/verify.h"
#include "common/zest_cli_run.h"

#include <gtest/gtest.h>

#include <sys/wait.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <mutex>
#include <sstream>
#include <thread>

namespace zest::testing {
namespace {
namespace fs = std::filesystem;

constexpr int kCases = 240;
constexpr unsigned kSeed = 20260801;
constexpr int kCliEvery = 30;               // every 30th case also runs through the zest binary
constexpr double kSecondsPerOperation = 10;  // far above the few milliseconds a case takes
constexpr int kHangSeconds = 120;            // the watchdog's limit for one case

using Tensors = std::map<std::string, torch::Tensor>;

// The original checkpoint and what each of its steps must give.
struct Reference {
  bool ema = false;                                  // saved (and resumed) with an EMA of the weights
  std::map<int64_t, Tensors> params;                 // merged: state-dict name → tensor
  std::map<int64_t, std::vector<Tensors>> engines;   // resumed: per rank, master and optimizer state
};

Tensors weights_of(Engine& engine) {
  Tensors out = {{"master", engine.master_shard().clone()}};
  for (const auto& [name, t] : engine.optimizer().state_tensors()) out[name] = t.clone();
  if (engine.ema()) out["ema"] = engine.ema()->shard().clone();
  return out;
}

bool same(const Tensors& a, const Tensors& b) {
  if (a.size() != b.size()) return false;
  for (const auto& [name, t] : a)
    if (!b.count(name) || t.sizes() != b.at(name).sizes() || t.scalar_type() != b.at(name).scalar_type() ||
        !torch::equal(t, b.at(name)))
      return false;
  return true;
}

Reference make_base(const std::string& root, bool ema) {
  Reference ref;
  ref.ema = ema;
  run_ranks(2, [&](int rank, std::shared_ptr<Communicator> comm) {
    ToyRun run = make_toy_run(comm, {2, false, 7, ema});
    for (const auto& [from, to] : {std::pair<int64_t, int64_t>{0, 3}, {3, 5}}) {
      train_toy(run, from, to);
      checkpoint::save(*run.engine, toy_save_request(root));
      if (rank == 0) ref.params[to] = params_of(*run.model);
    }
  });
  for (const int64_t step : {3, 5}) {
    ref.engines[step].resize(2);
    run_ranks(2, [&](int rank, std::shared_ptr<Communicator> comm) {
      ToyRun run = make_toy_run(comm, {2, false, 99, ema});
      checkpoint::load(*run.engine, toy_load_request(root + "/" + checkpoint::step_dir_name(step)));
      ref.engines[step][rank] = weights_of(*run.engine);
    });
  }
  return ref;
}

struct Outcome {
  bool ok = false;
  std::string error;  // when refused
  int64_t step = -1;  // the step the tool read, when it succeeded
  std::string unclear;  // an exception that is not zest::Error, or a wrong result
  double seconds = 0;
};

template <typename Fn>
Outcome attempt(Fn&& fn) {
  Outcome out;
  const auto start = std::chrono::steady_clock::now();
  try {
    fn(out);
  } catch (const zest::Error& e) {
    out.ok = false;
    out.error = e.what();
  } catch (const std::exception& e) {
    out.ok = false;
    out.unclear = std::string("not a zest::Error: ") + e.what();
  }
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

Outcome run_inspect(const std::string& path) {
  return attempt([&](Outcome& out) {
    const auto report = checkpoint::inspect_checkpoint(path, /*hash=*/true);
    out.ok = report.ok();
    out.step = report.manifest.step;
    for (size_t r = 0; r < report.files.size() && !out.ok; ++r)
      out.error += report.files[r].problem(report.manifest.files[r]);
  });
}

Outcome run_merge(const std::string& path, const std::string& out_path, const Reference& ref) {
  return attempt([&](Outcome& out) {
    checkpoint::merge_offline(path, out_path, {});
    const safetensors::Reader reader(out_path);
    out.step = std::stoll(reader.metadata().at("zest.step"));
    Tensors merged;
    for (auto& [name, t] : safetensors::load_file(out_path)) merged[name] = t;
    out.ok = true;
    if (!ref.params.count(out.step) || !same(merged, ref.params.at(out.step)))
      out.unclear = "merge succeeded with weights that differ from step " + std::to_string(out.step) + "'s";
  });
}

// A resume on 2 ranks (threads); both must agree, and a refusal must leave both engines untouched.
Outcome run_load(const std::string& path, const Reference& ref) {
  std::vector<Outcome> per_rank(2);
  run_ranks(2, [&](int rank, std::shared_ptr<Communicator> comm) {
    ToyRun run = make_toy_run(comm, {2, false, 99, ref.ema});
    const Tensors before = weights_of(*run.engine);
    per_rank[rank] = attempt([&](Outcome& out) {
      out.step = checkpoint::load(*run.engine, toy_load_request(path)).step;
      out.ok = true;
      const bool known = ref.engines.count(out.step) > 0;
      if (!known || !same(weights_of(*run.engine), ref.engines.at(out.step)[rank]) ||
          run.engine->step_count() != out.step)
        out.unclear = "resume succeeded with state that differs from step " + std::to_string(out.step) + "'s";
    });
    if (!per_rank[rank].ok && !same(weights_of(*run.engine), before))
      per_rank[rank].unclear = "a refused resume changed the engine";
  });
  if (per_rank[0].ok != per_rank[1].ok) per_rank[0].unclear = "the ranks disagree about the resume";
  if (per_rank[0].unclear.empty()) per_rank[0].unclear = per_rank[1].unclear;
  return per_rank[0];
}

// A clear error: a zest::Error naming the checkpoint, not a library's raw exception text.
std::string unclear_message(const Outcome& o, const std::string& case_name) {
  if (!o.unclear.empty()) return o.unclear;
  if (o.ok) return "";
  if (o.error.find(case_name) == std::string::npos) return "the error does not name the checkpoint: " + o.error;
  for (const char* raw : {"json.exception", "basic_string", "c10::", "std::"})
    if (o.error.find(raw) != std::string::npos) return std::string("raw library text '") + raw + "': " + o.error;
  return "";
}

struct Counts {
  int cases = 0, rehashed = 0, inspect_ok = 0, merge_ok = 0, load_ok = 0;
  std::string example;  // one refusal message of the category, as a user would read it

  void add(const Counts& c) {
    cases += c.cases;
    rehashed += c.rehashed;
    inspect_ok += c.inspect_ok;
    merge_ok += c.merge_ok;
    load_ok += c.load_ok;
  }
  void print(const std::string& name) const {
    std::printf("[ fuzz ] %-33s %5d %8d | %6d / %-7d | %6d / %-7d | %6d / %-7d\n", name.c_str(), cases, rehashed,
                inspect_ok, cases - inspect_ok, merge_ok, cases - merge_ok, load_ok, cases - load_ok);
  }
};

// The first line of a message, without the source location, shortened.
std::string excerpt(const std::string& message) {
  std::string line = message.substr(0, message.find('\n'));
  const size_t location = line.rfind(" (/");
  if (location != std::string::npos) line.erase(location);
  return line.size() > 200 ? line.substr(0, 197) + "..." : line;
}

// Aborts the test binary when a case makes no progress for kHangSeconds (a hang must not pass).
class Watchdog {
 public:
  Watchdog() : thread_([this] { watch(); }) {}
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void progress(const std::string& what) {
    std::lock_guard<std::mutex> lock(mutex_);
    what_ = what;
    last_ = std::chrono::steady_clock::now();
  }

 private:
  void watch() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!done_) {
      cv_.wait_for(lock, std::chrono::seconds(1));
      if (!done_ && std::chrono::steady_clock::now() - last_ > std::chrono::seconds(kHangSeconds)) {
        std::fprintf(stderr, "fuzz: %s has not finished in %d s (a hang); aborting\n", what_.c_str(), kHangSeconds);
        std::abort();
      }
    }
  }
  std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  std::string what_;
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
  std::thread thread_;
};

// The CLI gives the in-process verdicts, as exit status 0 or 1 and at most one error line.
void check_cli(const std::string& path, const std::string& dir, bool inspect_ok, bool merge_ok,
               const std::string& what, int& cli_runs) {
  if (!fs::exists(std::string(ZEST_BINARY_DIR) + "/zest")) return;
  fs::create_directories(dir);
  const ZestRun inspect = run_zest("ckpt inspect " + path + " --verify", dir + "/inspect.log");
  const ZestRun merge = run_zest("merge " + path + " -o " + dir + "/cli.safetensors", dir + "/merge.log");
  cli_runs += 2;
  EXPECT_EQ(inspect.status, inspect_ok ? 0 : 1) << what << ":\n" << inspect.output;
  EXPECT_EQ(merge.status, merge_ok ? 0 : 1) << what << ":\n" << merge.output;
  for (const ZestRun* ran : {&inspect, &merge}) {
    size_t errors = 0;
    for (size_t at = 0; (at = ran->output.find("zest: error:", at)) != std::string::npos; ++at) ++errors;
    EXPECT_LE(errors, 1u) << what << ":\n" << ran->output;
    EXPECT_EQ(ran->output.find("terminate called"), std::string::npos) << what << ":\n" << ran->output;
  }
}

// The state shared by the cases of one fuzz run.
struct FuzzRun {
  std::vector<std::pair<std::string, Reference>> bases;  // folder and reference: without, with an EMA
  const TempDir& work;
  std::map<std::string, Counts> counts;
  double slowest = 0;
  int cli_runs = 0;
  int ema_cases = 0;
};

// The three verdicts on one checkpoint, judged; returns the number of problems (each also a failure).
int judge(const std::string& what, const std::string& case_name, const Mutation& m, const Outcome& inspect,
          const Outcome& merge, const Outcome& load, FuzzRun& run) {
  int problems = 0;
  auto fail = [&](const std::string& message) {
    ++problems;
    ADD_FAILURE() << what << ": " << message;
  };
  for (const auto& [tool, o] : {std::pair<std::string, const Outcome*>{"inspect --verify", &inspect},
                                {"merge", &merge}, {"resume", &load}}) {
    if (const std::string bad = unclear_message(*o, case_name); !bad.empty()) fail(tool + ": " + bad);
    if (o->seconds > kSecondsPerOperation) fail(str(tool, " took ", o->seconds, " s"));
    run.slowest = std::max(run.slowest, o->seconds);
    if (m.expect == Expect::refused && o->ok) fail(tool + " accepted damage");
    if (m.expect == Expect::ok && !o->ok) fail(tool + " refused a harmless change: " + o->error);
  }
  if (inspect.ok != merge.ok) fail("inspect --verify and merge disagree: " + inspect.error + " | " + merge.error);
  if (load.ok && !inspect.ok) fail("a resume succeeded where inspect --verify refused: " + inspect.error);
  if (merge.ok && load.ok && merge.step != load.step) fail("merge and resume read different steps");
  return problems;
}

// Case i: a fresh copy of a base checkpoint (the bases alternate round by round through the
// categories), one mutation, the three tools (and a CLI sample).
int run_case(int i, std::mt19937& rng, Watchdog& watchdog, FuzzRun& run) {
  const size_t round = static_cast<size_t>(i) / fuzz_categories().size();
  const auto& [base, ref] = run.bases[round % run.bases.size()];
  run.ema_cases += ref.ema;
  const std::string& category = fuzz_categories()[static_cast<size_t>(i) % fuzz_categories().size()];
  const std::string case_name = "case_" + std::to_string(i);
  const std::string root = run.work.sub(case_name), out = run.work.sub(case_name + "_out");
  fs::copy(base, root, fs::copy_options::recursive);
  const Mutation m = mutate_checkpoint(root, category, rng);
  const std::string what = case_name + (ref.ema ? " (EMA)" : "") + " [" + category + ": " + m.description + "]";
  watchdog.progress(what);
  // The checkpoint as a user may name it: its root, DIR/latest, or the step folder.
  const bool latest_is_file = fs::is_regular_file(root + "/latest");
  const std::string path = i % 3 == 1 && latest_is_file ? root + "/latest"
                           : i % 3 == 2 && category != "latest" ? root + "/step_00000005" : root;
  const Outcome inspect = run_inspect(path);
  const Outcome merge = run_merge(path, out + "/model.safetensors", ref);
  const Outcome load = run_load(path, ref);
  Counts& c = run.counts[category];
  ++c.cases;
  c.rehashed += m.rehashed;
  c.inspect_ok += inspect.ok;
  c.merge_ok += merge.ok;
  c.load_ok += load.ok;
  if (c.example.empty() && !load.ok) c.example = excerpt(load.error);
  const int problems = judge(what, case_name, m, inspect, merge, load, run);
  if (i % kCliEvery == 7) check_cli(path, out, inspect.ok, merge.ok, what, run.cli_runs);
  fs::remove_all(root);
  fs::remove_all(out);
  return problems;
}

void print_counts(FuzzRun& run, double seconds) {
  Counts total;
  std::printf("[ fuzz ] %-33s %5s %8s | %-16s | %-16s | %-16s\n", "category", "cases", "rehashed",
              "inspect ok / ref", "merge ok / ref", "resume ok / ref");
  for (const std::string& category : fuzz_categories()) {
    run.counts[category].print(category);
    total.add(run.counts[category]);
  }
  total.print("total");
  std::printf("[ fuzz ] %d cases (%d of a checkpoint with an EMA) in %.1f s (slowest operation %.2f s), %d CLI "
              "runs; seed %u\n", total.cases, run.ema_cases, seconds, run.slowest, run.cli_runs, kSeed);
  std::printf("[ fuzz ] a refusal of each category, as the resume reports it:\n");
  for (const std::string& category : fuzz_categories())
    if (!run.counts[category].example.empty())
      std::printf("[ fuzz ]   %s: %s\n", category.c_str(), run.counts[category].example.c_str());
}

TEST(CheckpointFuzz, MutatedCheckpointsEndInOkOrAClearError) {
  const TempDir work("fuzz");
  FuzzRun run{{{work.sub("base"), make_base(work.sub("base"), false)},
               {work.sub("base_ema"), make_base(work.sub("base_ema"), true)}},
              work,
              {}};
  std::mt19937 rng(kSeed);
  std::ostringstream notes;  // load's notes (`latest` fallbacks, ...) would flood the test output
  std::streambuf* const stderr_buffer = std::cerr.rdbuf(notes.rdbuf());
  const auto start = std::chrono::steady_clock::now();
  int cases = 0, failing = 0;
  {
    Watchdog watchdog;
    for (; cases < kCases && failing < 20; ++cases) failing += run_case(cases, rng, watchdog, run) > 0;
  }
  std::cerr.rdbuf(stderr_buffer);
  print_counts(run, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  EXPECT_EQ(cases, kCases) << "stopped after 20 failing cases";
}

}  // namespace
}  // namespace zest::testing
