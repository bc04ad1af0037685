// The progress line and metrics.jsonl say GPU and host memory apart, labelled: the GPU's peak allocated
// and reserved bytes (only when there is a GPU) and the host's resident set; also the time a step waited
// for data and, on a checkpoint step, how long training stood still for the save.
#include "common/temp_dir.h"

#include "profiling/process_stats.h"
#include "train/progress.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

namespace zest::testing {
namespace {

std::vector<nlohmann::json> read_records(const std::string& path) {
  std::vector<nlohmann::json> records;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) records.push_back(nlohmann::json::parse(line));
  return records;
}

// The reporter's output for `records`, with stdout sent to a file.
std::string printed(ProgressReporter& reporter, const std::vector<StepRecord>& records, const std::string& file) {
  std::fflush(stdout);
  const int saved = ::dup(STDOUT_FILENO);
  std::FILE* out = std::fopen(file.c_str(), "w");
  ::dup2(::fileno(out), STDOUT_FILENO);
  for (const StepRecord& r : records) reporter.record(r);
  reporter.finish();
  std::fflush(stdout);
  ::dup2(saved, STDOUT_FILENO);
  ::close(saved);
  std::fclose(out);
  std::ifstream in(file);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(ProgressMemory, GpuAndHostMemoryAreSeparateLabelledFields) {
  TempDir dir("progress_memory");
  ProgressReporter reporter(true, 10, dir.file("metrics.jsonl"), "frames");
  StepRecord gpu;
  gpu.step = 1;
  gpu.gpu_peak_allocated_bytes = 38LL << 30;
  gpu.gpu_peak_reserved_bytes = 40LL << 30;
  gpu.host_rss_bytes = 4LL << 30;
  gpu.host_peak_rss_bytes = 5LL << 30;
  gpu.data_wait_ms = 2.5;
  StepRecord cpu = gpu;
  cpu.step = 2;
  cpu.gpu_peak_allocated_bytes = cpu.gpu_peak_reserved_bytes = -1;  // no GPU
  cpu.saved = true;
  cpu.checkpoint_stall_ms = 120;
  cpu.checkpoint_wait_ms = 20;
  cpu.checkpoint_staging_bytes = 12'000'000'000;
  const std::string text = printed(reporter, {gpu, cpu}, dir.file("stdout.txt"));
  const auto first = text.substr(0, text.find('\n'));
  const auto second = text.substr(text.find('\n') + 1);
  EXPECT_NE(first.find("gpu peak 38.00 GiB alloc, 40.00 GiB reserved"), std::string::npos) << first;
  EXPECT_NE(first.find("host rss 4.00 GiB"), std::string::npos) << first;
  EXPECT_NE(first.find("data wait 2.5 ms"), std::string::npos) << first;
  EXPECT_EQ(second.find("gpu"), std::string::npos) << second;
  EXPECT_NE(second.find("ckpt stall 120 ms"), std::string::npos) << second;
  EXPECT_EQ(text.find("mem "), std::string::npos) << "the old unlabelled field:\n" << text;

  const auto records = read_records(dir.file("metrics.jsonl"));
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0].at("gpu_peak_allocated_bytes"), 38LL << 30);
  EXPECT_EQ(records[0].at("gpu_peak_reserved_bytes"), 40LL << 30);
  EXPECT_EQ(records[0].at("host_rss_bytes"), 4LL << 30);
  EXPECT_EQ(records[0].at("host_peak_rss_bytes"), 5LL << 30);
  EXPECT_DOUBLE_EQ(records[0].at("data_wait_ms").get<double>(), 2.5);
  EXPECT_FALSE(records[0].contains("checkpoint_stall_ms"));
  EXPECT_FALSE(records[1].contains("gpu_peak_allocated_bytes"));
  EXPECT_DOUBLE_EQ(records[1].at("checkpoint_stall_ms").get<double>(), 120);
  EXPECT_DOUBLE_EQ(records[1].at("checkpoint_wait_ms").get<double>(), 20);
  EXPECT_EQ(records[1].at("checkpoint_staging_bytes"), 12'000'000'000);
}

TEST(ProgressMemory, ResidentSetIsMeasured) {
  const int64_t now = resident_memory_bytes();
  EXPECT_GT(now, 1 << 20);
  EXPECT_LE(now, peak_memory_bytes() + (1 << 20));
}

}  // namespace
}  // namespace zest::testing
