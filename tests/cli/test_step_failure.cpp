// Memory running out inside a training step, in-process: a CUDA out-of-memory error is injected at the
// start of step 5 of a CPU run (train/step_failure.h's hook), with asynchronous checkpoints every 2 steps,
// and `zest train` must say it in one message — the step, the batch's shapes, the allocation that
// failed, the device's free and total memory, what would fit — with none of the allocator's text or C++
// frames, and leave the last committed checkpoint (step 2; step 4 was still being written) as `latest`,
// intact. Also the message's pieces on their own.
#include "common/temp_dir.h"

#include "checkpoint/directory.h"
#include "checkpoint/verify.h"
#include "core/check.h"
#include "core/config_reader.h"
#include "data/model_features.h"
#include "data/synth.h"
#include "train/run_config.h"
#include "train/step_failure.h"
#include "train/trainer.h"

#include <c10/util/Exception.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace zest::testing {
namespace {

namespace fs = std::filesystem;

// What LibTorch's CUDA caching allocator throws, with its trace (the report must drop it).
const char* const kCudaOom =
    "CUDA out of memory. Tried to allocate 1.32 GiB. GPU 0 has a total capacity of 139.81 GiB of which 1.02 GiB "
    "is free. Of the allocated memory 130.2 GiB is allocated by PyTorch, and 4.1 GiB is reserved by PyTorch but "
    "unallocated.\nException raised from malloc at /pytorch/c10/cuda/CUDACachingAllocator.cpp:1574 (most recent "
    "call first):\nframe #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x98";

void throw_oom_at_step_5(int64_t step) {
  if (step == 5) throw c10::OutOfMemoryError({__func__, __FILE__, static_cast<uint32_t>(__LINE__)}, kCudaOom);
}

RunConfig tiny_run(const TempDir& dir) {
  SynthOptions synth;
  synth.samples = 16;
  synthesize_dataset(dir.sub("data"), builtin_model_features("hymotion_tiny"), synth);
  ConfigTable table = ConfigTable::parse_string(
      "[model]\nname = \"hymotion_tiny\"\n[data]\ndir = \"" + dir.sub("data") +
          "\"\nbatch_size = 2\nseq_len = 8\nnum_workers = 1\n[engine]\ndevice = \"cpu\"\nprecision = \"fp32\"\n"
          "[train]\nmax_steps = 8\nlog_every = 1\nrun_dir = \"" + dir.sub("run") +
          "\"\n[checkpoint]\nevery_steps = 2\nasync = true\n",
      "run.toml");
  return run_config_from_toml(table);
}

TEST(StepFailure, InjectedCudaOutOfMemoryIsOneMessageAndTheCheckpointStays) {
  TempDir dir("step_oom");
  const RunConfig config = tiny_run(dir);
  set_step_start_hook(&throw_oom_at_step_5);
  std::string message;
  try {
    run_training(config, TrainOptions{});
  } catch (const Error& e) {
    message = e.what();
  }
  set_step_start_hook(nullptr);
  ASSERT_FALSE(message.empty()) << "the injected out-of-memory did not end the run";
  for (const std::string& part : std::vector<std::string>{"out of memory in training step 5 on cpu", "allocating 1.32 GiB failed", "with the micro-batch ",
        "x [2, 8, 12]", "ctxt_input [2, ", "free of ", "the activations were estimated at ", "data.batch_size = 1",
        "the last checkpoint, " + config.checkpoint.dir + "/step_00000002, is untouched"}) {
    EXPECT_NE(message.find(part), std::string::npos) << "missing '" << part << "' in: " << message;
  }
  for (const std::string absent : {"CUDACachingAllocator", "Exception raised", "frame #", "\n", "Tried to allocate"})
    EXPECT_EQ(message.find(absent), std::string::npos) << "'" << absent << "' in: " << message;
  const auto latest = checkpoint::find_latest(config.checkpoint.dir);
  ASSERT_TRUE(latest.has_value());
  EXPECT_EQ(fs::path(*latest).filename(), "step_00000002");
  EXPECT_TRUE(checkpoint::inspect_checkpoint(*latest, /*hash=*/true).ok()) << *latest << " does not verify";
}

TEST(StepFailure, AllocationSizesAndBatchShapes) {
  EXPECT_EQ(failed_allocation_size(kCudaOom), "1.32 GiB");
  EXPECT_EQ(failed_allocation_size("DefaultCPUAllocator: can't allocate memory: you tried to allocate 2000000000 bytes."),
            "2.0 GB");
  EXPECT_EQ(failed_allocation_size("something else"), "");
  const TensorMap batch{{"a", torch::zeros({2, 3})}, {"b", torch::zeros({4})}};
  EXPECT_EQ(describe_batch(batch), "a [2, 3], b [4]");
}

}  // namespace
}  // namespace zest::testing
