// StepTrace (profiling/step_trace.h) on the CPU, and the [log] / [profile] tables: only the configured steps
// are recorded, the file is named as torch.profiler's tensorboard_trace_handler names it, its events
// nest, the eager step's backward spans fill the gaps between forwards; bad tables are one-line errors.
#include "common/error_of.h"
#include "common/temp_dir.h"
#include "trace_check.h"

#include "core/config_reader.h"
#include "profiling/step_trace.h"
#include "train/run_config.h"

#include <gtest/gtest.h>

#include <thread>

namespace zest::testing {
namespace {

void busy(int microseconds) { std::this_thread::sleep_for(std::chrono::microseconds(microseconds)); }

TEST(StepTrace, RecordsTheConfiguredStepsOnly) {
  const TempDir dir("step_trace");
  StepTrace trace(dir.path(), 0, 1, 2, 3, /*device_kernels=*/false);
  for (int64_t step = 1; step <= 4; ++step) {
    trace.begin_step(step);
    {
      StepTrace::Phase wait = trace.phase("enumerate(DataLoader)#TrainData.__next__");
      busy(50);
    }
    StepTrace::Phase body = trace.step_body();
    for (int micro = 0; micro < 2; ++micro) {
      const StepTrace::Phase forward = trace.forward_phase(micro);
      busy(100);
    }
    busy(100);  // the last backward and the optimizer
    trace.end_step_body(body, StepTrace::StepKind::eager);
    {
      const StepTrace::Phase saving = trace.phase("checkpoint save");
      busy(50);
    }
    trace.end_step(step);
    EXPECT_EQ(trace.written().empty(), step < 3) << step;
  }
  const auto files = trace_files(dir.path());
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(files[0], trace.written());
  const auto json = read_trace(files[0]);
  const auto names = check_trace_events(json);
  EXPECT_TRUE(has_name(names, "ProfilerStep#2"));
  EXPECT_TRUE(has_name(names, "ProfilerStep#3"));
  EXPECT_FALSE(has_name(names, "ProfilerStep#1"));
  EXPECT_FALSE(has_name(names, "ProfilerStep#4"));
  EXPECT_EQ(std::count(names.begin(), names.end(), "backward (micro-batch 0)"), 2);
  EXPECT_EQ(std::count(names.begin(), names.end(), "backward (micro-batch 1) and optimizer step"), 2);
  EXPECT_EQ(std::count(names.begin(), names.end(), "checkpoint save"), 2);
  // The step spans hold their phases: a step's span is at least as long as what ran inside it.
  double step_us = 0, inside_us = 0;
  for (const auto& e : json["traceEvents"]) {
    if (e["ph"] != "X") continue;
    if (e["name"] == "ProfilerStep#2") step_us = e["dur"].get<double>();
    EXPECT_EQ(e["cat"], "user_annotation") << e.dump();
  }
  for (const auto& e : json["traceEvents"])
    if (e["ph"] == "X" && e["name"] == "forward, backward, optimizer step") inside_us = e["dur"].get<double>();
  EXPECT_GT(step_us, 0.0);
  EXPECT_GE(step_us, inside_us);
  EXPECT_TRUE(json.contains("baseTimeNanoseconds"));
}

// A CUDA-graph step is one span named so, with no inferred backward inside.
TEST(StepTrace, GraphStepsAreNamedAndAStoppedRunStillWrites) {
  const TempDir dir("step_trace_graph");
  StepTrace trace(dir.path(), 1, 2, 1, 10, false);
  trace.begin_step(1);
  StepTrace::Phase body = trace.step_body();
  { const StepTrace::Phase forward = trace.forward_phase(0); }
  trace.end_step_body(body, StepTrace::StepKind::graph_replay);
  trace.end_step(1);
  trace.begin_step(2);  // stopped inside step 2: finish() closes it and writes
  trace.finish();
  const auto names = check_trace_events(read_trace(trace.written()));
  EXPECT_TRUE(has_name(names, "CUDA graph replay (forward, backward, optimizer step)"));
  EXPECT_FALSE(has_name(names, "backward (micro-batch 0) and optimizer step"));
  EXPECT_TRUE(has_name(names, "ProfilerStep#2"));
}

const std::string kRun = "[model]\nname = \"hymotion_tiny\"\n[data]\ndir = \"d\"\n[train]\nmax_steps = 10\n";

RunConfig parse(const std::string& extra) {
  ConfigTable root = ConfigTable::parse_string(kRun + extra, "run.toml");
  return run_config_from_toml(root);
}

TEST(StepTrace, LogAndProfileTablesAreCheckedAndPrinted) {
  const RunConfig defaults = parse("");
  EXPECT_TRUE(defaults.log.tensorboard);
  EXPECT_FALSE(defaults.profile.enabled());
  const RunConfig set = parse("[log]\ntensorboard = false\n[profile]\nsteps = [3, 5]\n");
  EXPECT_FALSE(set.log.tensorboard);
  EXPECT_EQ(set.profile.steps, (std::vector<int64_t>{3, 5}));
  // `config check` prints both tables, and what it prints reads back the same.
  const std::string printed = to_toml(set);
  EXPECT_NE(printed.find("[log]\ntensorboard = false"), std::string::npos) << printed;
  EXPECT_NE(printed.find("steps = [3, 5]"), std::string::npos) << printed;
  ConfigTable again = ConfigTable::parse_string(printed, "printed.toml");
  EXPECT_EQ(run_config_from_toml(again).profile.steps, set.profile.steps);

  const std::vector<std::pair<std::string, std::string>> bad = {
      {"[profile]\nsteps = [5, 3]\n", "first <= last"},
      {"[profile]\nsteps = [0, 3]\n", ">= 1"},
      {"[profile]\nsteps = [1, 2, 3]\n", "[first, last]"},
      {"[profile]\nsteps = [11, 12]\n", "train.max_steps"},
      {"[profile]\nsteps = [1, 200]\n", "at most 100"},
      {"[profile]\nschedule = 1\n", "[profile] steps = [first, last]"},
      {"[log]\ntensorbord = true\n", "tensorboard"},
      {"[log]\ntensorboard = 1\n", "log.tensorboard"},
      {"[tensorboard]\nenabled = true\n", "[log] tensorboard"}};
  for (const auto& [text, part] : bad) {
    const std::string message = error_of([&] { parse(text); });
    EXPECT_NE(message.find(part), std::string::npos) << text << " → " << message;
    EXPECT_NE(message.find("run.toml"), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace zest::testing
