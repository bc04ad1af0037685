// `zest train` on one GPU (ctest label `gpu`): the data path and the checkpoints do not hold the GPU up,
// and memory that runs out says what to do.
// - Ten steady-state steps of the real step loop (device prefetch of page-locked batches, forward,
//   backward, update) never synchronize the host with the device (LibTorch's sync debug mode set to
//   error from the start of step 3 to the start of step 13; the logging and saving step 14 is outside).
// - An asynchronous save of hymotion_lite's shard stands training still for far less than a synchronous
//   save of the same shard, into one page-locked staging buffer of the shard's size (metrics.jsonl).
// - kill -9 while the background writer writes leaves the previous checkpoint as `latest`, intact, and
//   the run resumes from it.
// - A run whose activations cannot fit is refused before its first step, naming what fits; a CUDA
//   out-of-memory inside a step (free memory taken away at step 2) is one message, and the checkpoint of
//   step 1 stays `latest`.
#include "checkpoint/directory.h"
#include "checkpoint/verify.h"
#include "common/temp_dir.h"
#include "core/check.h"
#include "core/config_reader.h"
#include "data/model_features.h"
#include "data/synth.h"
#include "train/run_config.h"
#include "train/step_failure.h"
#include "train/trainer.h"

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

namespace zest::testing {
namespace {

namespace fs = std::filesystem;

std::string dataset_for(const TempDir& dir, const std::string& model, int64_t samples) {
  if (fs::exists(fs::path(dir.sub("data_" + model)) / "dataset.json")) return dir.sub("data_" + model);  // a second run
  SynthOptions synth;
  synth.samples = samples;
  synthesize_dataset(dir.sub("data_" + model), builtin_model_features(model), synth);
  return dir.sub("data_" + model);
}

RunConfig gpu_run(const TempDir& dir, const std::string& model, const std::string& extra, int64_t samples = 32) {
  ConfigTable table = ConfigTable::parse_string(
      "[model]\nname = \"" + model + "\"\n[data]\ndir = \"" + dataset_for(dir, model, samples) +
          "\"\nbatch_size = 4\nseq_len = 64\nnum_workers = 2\n[engine]\ndevice = \"cuda\"\nprecision = \"bf16\"\n" + extra,
      "run.toml");
  return run_config_from_toml(table);
}

std::vector<nlohmann::json> metrics(const RunConfig& config) {
  std::vector<nlohmann::json> records;
  std::ifstream in(fs::path(config.train.run_dir) / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) records.push_back(nlohmann::json::parse(line));
  return records;
}

// Steps 5–14: past the two eager warm-up steps and the capture of the step's CUDA graph (step 3), which
// happen once per batch shape (engine/step_graphs.h).
void sync_errors_in_steps_5_to_14(int64_t step) {
  if (step == 5) c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_ERROR);
  if (step == 15) c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_DISABLED);
}

TEST(GpuTrainPath, TenSteadyStateStepsOfZestTrainNeverSynchronize) {
  TempDir dir("gpu_nosync");
  const RunConfig config = gpu_run(dir, "hymotion_tiny",
                                   "[train]\nmax_steps = 16\nlog_every = 100\nrun_dir = \"" + dir.sub("run") +
                                       "\"\n[checkpoint]\nevery_steps = 0\nmerge_at_end = false\n");
  set_step_start_hook(&sync_errors_in_steps_5_to_14);
  std::string error;
  try {
    run_training(config, TrainOptions{});
  } catch (const std::exception& e) {
    error = e.what();
  }
  c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_DISABLED);
  set_step_start_hook(nullptr);
  EXPECT_EQ(error, "") << "a steady-state step synchronized with the device";
  const auto records = metrics(config);
  ASSERT_FALSE(records.empty());
  EXPECT_TRUE(records.back().contains("data_wait_ms"));
  EXPECT_GT(records.back().at("gpu_peak_allocated_bytes").get<int64_t>(), 0);
  EXPECT_GE(records.back().at("gpu_peak_reserved_bytes").get<int64_t>(),
            records.back().at("gpu_peak_allocated_bytes").get<int64_t>());
  EXPECT_GT(records.back().at("host_rss_bytes").get<int64_t>(), 0);
}

// The stall of the step-4 save of hymotion_lite (about 3.6 GB of fp32 master and AdamW moments).
nlohmann::json save_record(const TempDir& dir, bool async) {
  const std::string tag = async ? "async" : "sync";
  const RunConfig config = gpu_run(dir, "hymotion_lite",
                                   "[train]\nmax_steps = 4\nlog_every = 1\nrun_dir = \"" + dir.sub("run_" + tag) +
                                       "\"\n[checkpoint]\nevery_steps = 4\nmerge_at_end = false\nasync = " +
                                       (async ? "true" : "false") + "\n");
  run_training(config, TrainOptions{});
  for (const auto& r : metrics(config))
    if (r.contains("checkpoint_stall_ms")) return r;
  return {};
}

TEST(GpuTrainPath, AsyncSaveStandsTrainingStillFarLessThanASyncSave) {
  TempDir dir("gpu_async_save");
  const nlohmann::json sync = save_record(dir, false);
  const nlohmann::json async = save_record(dir, true);
  ASSERT_TRUE(sync.contains("checkpoint_stall_ms") && async.contains("checkpoint_stall_ms"));
  const double sync_ms = sync.at("checkpoint_stall_ms").get<double>();
  const double async_ms = async.at("checkpoint_stall_ms").get<double>();
  std::printf("[ info ] hymotion_lite step-4 save: sync %.0f ms, async stall %.0f ms, staging %.2f GB\n", sync_ms,
              async_ms, async.at("checkpoint_staging_bytes").get<double>() / 1e9);
  EXPECT_LT(async_ms, sync_ms / 4);
  EXPECT_LT(async_ms, 1000.0);
  EXPECT_GT(async.at("checkpoint_staging_bytes").get<int64_t>(), 3'000'000'000);
}

// Runs `zest train RUN` with args; returns the child's pid (exec'd at once: safe after CUDA init).
pid_t spawn_train(const std::string& run_file, const std::vector<std::string>& args) {
  std::vector<std::string> argv{std::string(ZEST_BINARY_DIR) + "/zest", "train", run_file};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> raw;
  for (auto& a : argv) raw.push_back(a.data());
  raw.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::execv(raw[0], raw.data());
    ::_exit(127);
  }
  return pid;
}

TEST(GpuTrainPath, KillDuringTheBackgroundWriteLeavesThePreviousCheckpoint) {
  TempDir dir("gpu_kill_async");
  const std::string data = dataset_for(dir, "hymotion_lite", 32);
  const std::string run_file = dir.file("run.toml");
  std::ofstream(run_file) << "[model]\nname = \"hymotion_lite\"\n[data]\ndir = \"" << data
                          << "\"\nbatch_size = 4\nseq_len = 64\n[engine]\ndevice = \"cuda\"\n[train]\nmax_steps = 8\n"
                          << "log_every = 1\nrun_dir = \"" << dir.sub("run") << "\"\n[checkpoint]\nevery_steps = 2\n"
                          << "async = true\nmerge_at_end = false\n";
  const fs::path checkpoints = fs::path(dir.sub("run")) / "checkpoints";
  const fs::path writing = checkpoints / "step_00000004.tmp" / "rank_00000.safetensors";
  const pid_t pid = spawn_train(run_file, {});
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(5);
  bool seen = false;
  while (std::chrono::steady_clock::now() < deadline && !seen) {
    std::error_code ec;
    seen = fs::exists(writing, ec);
    if (!seen) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  std::error_code ec;
  const auto size_at_kill = fs::exists(writing, ec) ? fs::file_size(writing, ec) : 0;
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(seen) << "the step-4 rank file never appeared";
  std::printf("[ info ] killed with %llu bytes of the step-4 rank file written\n",
              static_cast<unsigned long long>(size_at_kill));
  const auto latest = checkpoint::find_latest(checkpoints.string());
  ASSERT_TRUE(latest.has_value());
  EXPECT_EQ(fs::path(*latest).filename(), "step_00000002");
  EXPECT_TRUE(checkpoint::inspect_checkpoint(*latest, /*hash=*/true).ok());
  const pid_t again = spawn_train(run_file, {});
  ::waitpid(again, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the resumed run failed";
  EXPECT_EQ(fs::path(*checkpoint::find_latest(checkpoints.string())).filename(), "step_00000008");
}

TEST(GpuTrainPath, ActivationsThatCannotFitAreRefusedNamingWhatFits) {
  TempDir dir("gpu_preflight");
  const RunConfig base = gpu_run(dir, "hymotion_1b", "[train]\nmax_steps = 2\nrun_dir = \"" + dir.sub("run") + "\"\n", 16);
  RunConfig config = base;
  config.data.batch_size = 512;
  config.data.seq_len = 360;
  std::string message;
  try {
    run_training(config, TrainOptions{});
  } catch (const Error& e) {
    message = e.what();
  }
  std::printf("[ info ] %s\n", message.c_str());
  for (const std::string part : {"data.batch_size = 512 needs about", "of activations per micro-batch",
                                 "free after the model state", "at most data.batch_size = "})
    EXPECT_NE(message.find(part), std::string::npos) << "missing '" << part << "' in: " << message;
  EXPECT_FALSE(fs::exists(fs::path(config.train.run_dir) / "checkpoints" / "latest"));
}

torch::Tensor& blocker() {
  static torch::Tensor t;
  return t;
}

void take_the_gpu_memory_at_step_2(int64_t step) {
  if (step != 2) return;
  size_t free_bytes = 0, total = 0;
  cudaMemGetInfo(&free_bytes, &total);
  // Everything the allocator has cached goes back first, then all but 32 MB of the rest is taken.
  c10::cuda::CUDACachingAllocator::emptyCache();
  cudaMemGetInfo(&free_bytes, &total);
  blocker() = torch::empty({static_cast<int64_t>(free_bytes) - (32LL << 20)},
                           torch::TensorOptions().dtype(torch::kUInt8).device(torch::kCUDA));
}

TEST(GpuTrainPath, OutOfMemoryInAStepIsOneMessage) {
  TempDir dir("gpu_oom");
  const RunConfig config = gpu_run(dir, "hymotion_lite",
                                   "[train]\nmax_steps = 4\nlog_every = 1\nrun_dir = \"" + dir.sub("run") +
                                       "\"\n[checkpoint]\nevery_steps = 1\nmerge_at_end = false\n");
  set_step_start_hook(&take_the_gpu_memory_at_step_2);
  std::string message;
  try {
    run_training(config, TrainOptions{});
  } catch (const Error& e) {
    message = e.what();
  }
  set_step_start_hook(nullptr);
  blocker() = torch::Tensor();
  std::printf("[ info ] %s\n", message.c_str());
  for (const std::string part : {"out of memory in training step 2 on cuda", "failed with the micro-batch",
                                 "free of", "the activations were estimated at", "is untouched"})
    EXPECT_NE(message.find(part), std::string::npos) << "missing '" << part << "' in: " << message;
  for (const std::string absent : {"CUDACachingAllocator", "Exception raised", "frame #", "\n"})
    EXPECT_EQ(message.find(absent), std::string::npos) << "'" << absent << "' in: " << message;
  const auto latest = checkpoint::find_latest((fs::path(config.train.run_dir) / "checkpoints").string());
  ASSERT_TRUE(latest.has_value());
  EXPECT_EQ(fs::path(*latest).filename(), "step_00000001");
  EXPECT_TRUE(checkpoint::inspect_checkpoint(*latest, /*hash=*/true).ok());
}

}  // namespace
}  // namespace zest::testing
