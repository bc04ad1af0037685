// `zest train` on 2 ranks (zest launch) writes what TensorBoard reads, checked with the independent
// reader: rank 0's one event file whose scalars equal metrics.jsonl record by record (tags, steps, values),
// the resolved config as text, and a step trace per rank whose events nest; a resumed run adds a second
// file, starting with a session start, and its steps continue where the first file's stopped.
#include "common/temp_dir.h"
#include "event_file_reader.h"
#include "trace_check.h"
#include "examples/zest_run.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

namespace zest::testing {
namespace {

namespace fs = std::filesystem;

constexpr int kRanks = 2;

void write_run_file(const fs::path& path) {
  std::ofstream(path) << "[model]\nname = \"hymotion_tiny\"\n"
                      << "[data]\ndir = \"data\"\nbatch_size = 2\nseq_len = 12\nnum_workers = 1\n"
                      << "[engine]\naccumulation_steps = 2\nprecision = \"fp32\"\n"
                      << "[optimizer]\nlr = 3e-3\n"
                      << "[train]\nmax_steps = 6\nlog_every = 2\nrun_dir = \"run\"\n"
                      << "[checkpoint]\nevery_steps = 3\nmerge_at_end = false\n"
                      << "[profile]\nsteps = [2, 3]\n";
}

std::vector<nlohmann::json> step_records(const fs::path& metrics) {
  std::vector<nlohmann::json> records;
  std::ifstream in(metrics);
  for (std::string line; std::getline(in, line);) {
    auto record = nlohmann::json::parse(line);
    if (record.contains("loss")) records.push_back(std::move(record));
  }
  return records;
}

std::vector<std::string> event_files(const fs::path& dir) {
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.path().filename().string().rfind("events.out.tfevents.", 0) == 0) files.push_back(entry.path().string());
  std::sort(files.begin(), files.end());
  return files;
}

// What each scalar tag must hold for a metrics.jsonl record (absent: no point at that step).
std::map<std::string, double> expected_scalars(const nlohmann::json& r) {
  constexpr double kGiB = 1073741824.0;
  std::map<std::string, double> s = {
      {"train/loss", r["loss"].get<double>()},
      {"train/lr", r["lr"].get<double>()},
      {"train/loss_scale", r["loss_scale"].get<double>()},
      {"train/skipped_steps", r["skipped_total"].get<double>()},
      {"throughput/samples_per_s_per_gpu", r["samples_per_s"].get<double>() / kRanks},
      {"throughput/frames_per_s_per_gpu", r["items_per_s"].get<double>() / kRanks},
      {"time/step_ms", r["step_ms"].get<double>()},
      {"time/data_wait_ms", r["data_wait_ms"].get<double>()},
      {"memory/host_rss_gib", r["host_rss_bytes"].get<double>() / kGiB},
      {"memory/host_peak_rss_gib", r["host_peak_rss_bytes"].get<double>() / kGiB}};
  if (!r["grad_norm"].is_null()) s["train/grad_norm"] = r["grad_norm"].get<double>();
  if (r.contains("checkpoint_stall_ms")) s["time/checkpoint_stall_ms"] = r["checkpoint_stall_ms"].get<double>();
  return s;
}

// The file's scalars by step and tag; every one is compared with the metrics record of its step.
void expect_scalars_match(const std::vector<tb::Event>& events, const std::vector<nlohmann::json>& records) {
  std::map<int64_t, std::map<std::string, float>> logged;
  for (const auto& e : events) {
    if (e.kind != tb::Event::kScalar) continue;
    EXPECT_EQ(logged[e.step].count(e.tag), 0u) << e.tag << " twice at step " << e.step;
    logged[e.step][e.tag] = e.value;
  }
  std::set<int64_t> metric_steps;
  for (const auto& r : records) {
    const int64_t step = r["step"].get<int64_t>();
    metric_steps.insert(step);
    const auto expected = expected_scalars(r);
    const auto& got = logged[step];
    EXPECT_EQ(got.size(), expected.size()) << "tags at step " << step;
    for (const auto& [tag, value] : expected) {
      ASSERT_TRUE(got.count(tag)) << tag << " missing at step " << step;
      EXPECT_EQ(got.at(tag), static_cast<float>(value)) << tag << " at step " << step;
    }
  }
  for (const auto& [step, tags] : logged) EXPECT_TRUE(metric_steps.count(step)) << "scalars at step " << step;
}

std::string config_markdown(const fs::path& config_toml) {
  std::ifstream in(config_toml);
  std::string out;
  for (std::string line; std::getline(in, line);) out += (line.empty() ? "" : "    ") + line + "\n";
  return out;
}

TEST(TrainTensorBoard, EventsEqualMetricsAndAResumeContinues) {
  const TempDir tmp("train_tb");
  const fs::path dir = tmp.path();
  write_run_file(dir / "run.toml");
  const auto synth = run_in(dir, zest_binary() + " data synth --model hymotion_tiny --out data --samples 16");
  ASSERT_EQ(synth.status, 0) << synth.output;
  const std::string train = zest_binary() + " launch -n " + std::to_string(kRanks) + " -- " + zest_binary() +
                            " train run.toml";
  const auto first = run_in(dir, train);
  ASSERT_EQ(first.status, 0) << first.output;

  const fs::path tb_dir = dir / "run" / "tensorboard";
  auto files = event_files(tb_dir);
  ASSERT_EQ(files.size(), 1u) << "rank 0 alone writes events";
  const auto events = tb::read_events(files[0]);  // every CRC checked
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events[0].file_version, "brain.Event:2");
  EXPECT_EQ(events[1].tag, "config");
  EXPECT_EQ(events[1].step, 0);
  EXPECT_EQ(events[1].text, config_markdown(dir / "run" / "config.toml"));
  auto records = step_records(dir / "run" / "metrics.jsonl");
  ASSERT_EQ(records.size(), 4u);  // steps 2, 3 (checkpoint), 4, 6
  expect_scalars_match(events, records);

  // One trace per rank, of steps 2 and 3, with the host phases nested in their steps.
  const auto traces = trace_files(tb_dir.string());
  ASSERT_EQ(traces.size(), static_cast<size_t>(kRanks));
  for (const std::string& path : traces) {
    const auto names = check_trace_events(read_trace(path));
    for (const char* name : {"ProfilerStep#2", "ProfilerStep#3", "enumerate(DataLoader)#TrainData.__next__",
                             "forward (micro-batch 0)", "forward (micro-batch 1)",
                             "backward (micro-batch 1) and optimizer step", "checkpoint save",
                             "agree on stopping (collective)", "read and report the step's figures"}) {
      EXPECT_TRUE(has_name(names, name)) << name << " missing in " << path;
    }
    EXPECT_FALSE(has_name(names, "ProfilerStep#4")) << path;
  }

  // Resumed to 10 steps: a second file after the first, a session start past step 6, the new records.
  const auto resumed = run_in(dir, train + " --set train.max_steps=10");
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  files = event_files(tb_dir);
  ASSERT_EQ(files.size(), 2u);
  const auto more = tb::read_events(files[1]);
  ASSERT_GE(more.size(), 3u);
  EXPECT_TRUE(more[1].session_start);
  EXPECT_EQ(more[1].step, 7);
  EXPECT_EQ(more[2].tag, "config");
  EXPECT_EQ(more[2].step, 6);
  records = step_records(dir / "run" / "metrics.jsonl");
  std::vector<nlohmann::json> after;
  for (const auto& r : records)
    if (r["step"].get<int64_t>() > 6) after.push_back(r);
  ASSERT_EQ(after.size(), 3u);  // steps 8, 9 (checkpoint), 10
  expect_scalars_match(more, after);
  EXPECT_EQ(tb::read_events(files[0]).size(), events.size()) << "the first file is left as it was";
  EXPECT_EQ(trace_files(tb_dir.string()).size(), static_cast<size_t>(kRanks)) << "steps 2-3 were traced before";
}

}  // namespace
}  // namespace zest::testing
