// The pre-flight memory check refuses, before any allocation, a run whose model state cannot fit the
// device, and says what would: the other stages' needs and the GPUs the asked-for stage needs.
#include "engine/preflight.h"

#include <gtest/gtest.h>

namespace zest::testing {
namespace {

PreflightInputs ten_billion(int stage, int world) {
  PreflightInputs in;
  in.model_state = {10'000'000'000, world, stage, Precision::bf16, Precision::fp32, 8};
  return in;
}

TEST(Preflight, StageZeroOfTenBillionIsRefusedNamingWhatFits) {
  const int64_t free_bytes = 139'800'000'000;  // an H200 with nothing else on it
  const std::string problem = preflight_problem(ten_billion(0, 2), free_bytes, "GPU");
  EXPECT_NE(problem.find("stage 0 needs 180.0 GB of model state per GPU"), std::string::npos) << problem;
  EXPECT_NE(problem.find("this GPU has 139.8 GB free"), std::string::npos) << problem;
  EXPECT_NE(problem.find("stage 2 needs 100.0 GB"), std::string::npos) << problem;  // 2P + 16P/N
  EXPECT_NE(problem.find("stage 3 needs 80.0 GB"), std::string::npos) << problem;   // 16P/N: no 16-bit parameters at rest
  EXPECT_NE(problem.find("stage 1 needs 120.0 GB"), std::string::npos) << problem;  // 2P + 4P + 12P/N
  EXPECT_TRUE(preflight_problem(ten_billion(2, 2), free_bytes, "GPU").empty());
  EXPECT_TRUE(preflight_problem(ten_billion(3, 2), free_bytes, "GPU").empty());
}

TEST(Preflight, SaysHowManyGpusTheAskedForStageNeeds) {
  const std::string problem = preflight_problem(ten_billion(3, 1), 50'000'000'000, "GPU");
  EXPECT_NE(problem.find("stage 3 fits on 4 GPUs"), std::string::npos) << problem;  // 160/4 = 40 GB, 160/3 > 50
  EXPECT_EQ(problem.find("no stage fits"), std::string::npos) << problem;
}

TEST(Preflight, TransientBuffersCount) {
  PreflightInputs in = ten_billion(3, 8);
  const int64_t without = preflight_bytes(in, 3);
  in.largest_bucket_numel = 1'000'000;
  in.prefetch = 2;
  // Three fp32 gradient buckets in flight and four bf16 gathered buckets (running, two ahead, the last).
  EXPECT_EQ(preflight_bytes(in, 3) - without, 3 * 4'000'000 + 4 * 2'000'000);
  EXPECT_EQ(preflight_bytes(in, 1) - preflight_bytes(ten_billion(3, 8), 1), 0);
}

// The pre-flight asks the engine's ShardingPolicy: stage 2 on one rank keeps its gradients in the
// persistent buffer (no transient buckets), on two ranks it reduces transient buckets into the shard.
TEST(Preflight, TransientGradientsAsTheEngineKeepsThem) {
  for (const int world : {1, 2}) {
    PreflightInputs in = ten_billion(2, world);
    const int64_t without = preflight_bytes(in, 2);
    in.largest_bucket_numel = 1'000'000;
    EXPECT_EQ(preflight_bytes(in, 2) - without, world == 1 ? 0 : 3 * 4'000'000) << world << " rank(s)";
  }
}

// [engine] optimizer_in_backward: per-step full gradients (stages 0–1, any stage on one rank) go bucket by
// bucket in backward, so three buckets of them count instead of all; a sharded gradient shard stays.
TEST(Preflight, UpdatesInBackwardCountAFewBucketsOfGradients) {
  for (const int world : {1, 2}) {
    PreflightInputs in = ten_billion(1, world);
    in.largest_bucket_numel = 1'000'000;
    PreflightInputs in_backward = in;
    in_backward.model_state.optimizer_in_backward = true;
    const int64_t all_grads = 10'000'000'000LL * 4;
    for (int stage : {0, 1}) {
      EXPECT_EQ(preflight_bytes(in, stage) - preflight_bytes(in_backward, stage), all_grads - 3 * 4'000'000)
          << "stage " << stage << ", " << world << " rank(s)";
    }
    const int64_t stage2_saved = preflight_bytes(in, 2) - preflight_bytes(in_backward, 2);
    EXPECT_EQ(stage2_saved, world == 1 ? all_grads - 3 * 4'000'000 : 0) << world << " rank(s)";
  }
}

// One GPU, 10B parameters: no stage fits 139.8 GB (stage 3 on one rank is the whole 160 GB), but with the
// optimizer in host memory stage 1 keeps only bf16 parameters and fp32 gradients: 2P + 4P = 60 GB.
TEST(Preflight, OffloadIsNamedWhenItFitsAndCountsOnlyWhatStaysOnTheGpu) {
  const int64_t free_bytes = 139'800'000'000;
  const std::string problem = preflight_problem(ten_billion(0, 1), free_bytes, "GPU");
  EXPECT_NE(problem.find("stage 1 with [engine.offload] optimizer = \"cpu\" needs 60.0 GB on the GPU"),
            std::string::npos) << problem;
  PreflightInputs offloaded = ten_billion(2, 1);
  offloaded.model_state.offload_optimizer = true;
  EXPECT_EQ(preflight_bytes(offloaded, 2), 60'000'000'000);
  EXPECT_TRUE(preflight_problem(offloaded, free_bytes, "GPU").empty());
  // The host side: master 4P + Adam 8P + the staging ring: four slots of fp32 gradients and bf16
  // parameters, 256 MiB together (rounded down to whole elements).
  MemoryModelInputs in = offloaded.model_state;
  EXPECT_EQ(estimate_model_state_bytes(in).staging, 4 * (268'435'456 / 24) * 6);
  EXPECT_EQ(estimate_model_state_bytes(in).on_host(), 120'000'000'000 + 4 * (268'435'456 / 24) * 6);
  EXPECT_EQ(estimate_model_state_bytes(in).on_device(), 60'000'000'000);
  // A shard smaller than four slots needs no more ring than four copies of it.
  in.numel = 1000;
  EXPECT_EQ(estimate_model_state_bytes(in).staging, 4 * 1000 * 6);
}

// Offloaded, the ranks of one host share its memory: 10B on one rank needs 120.3 GB (+ 2 GB for the
// process); a host with 100 GB available refuses it and says how many ranks (one per host) would fit.
TEST(Preflight, OffloadChecksTheHostMemoryOfItsRanks) {
  PreflightInputs in = ten_billion(2, 1);
  in.model_state.offload_optimizer = true;
  const int64_t per_rank = preflight_host_bytes(in);
  EXPECT_EQ(per_rank, 120'000'000'000 + 4 * (268'435'456 / 24) * 6 + kProcessHostBytes);
  EXPECT_TRUE(host_preflight_problem(in, 1, per_rank).empty());
  const std::string problem = host_preflight_problem(in, 1, 100'000'000'000);
  EXPECT_NE(problem.find("needs 122.3 GB of host memory per rank"), std::string::npos) << problem;
  EXPECT_NE(problem.find("this host has 100.0 GB available"), std::string::npos) << problem;
  EXPECT_NE(problem.find("it fits on 2 ranks with 1 per host"), std::string::npos) << problem;
  // Two ranks on the same host need twice their share: 2 × (60.3 + 2) GB > 100 GB.
  in.model_state.world_size = 2;
  EXPECT_NE(host_preflight_problem(in, 2, 100'000'000'000).find("124.5 GB for the 2 rank(s) on this host"),
            std::string::npos);
  // Without offload nothing is checked on the host.
  EXPECT_EQ(preflight_host_bytes(ten_billion(2, 1)), 0);
  EXPECT_GT(host_available_bytes(), 0);  // Linux: /proc/meminfo
}

TEST(Preflight, UnknownFreeMemoryOnTheCpuIsNotChecked) {
  EXPECT_EQ(device_free_bytes(torch::kCPU), -1);
  EXPECT_NO_THROW(check_fits(ten_billion(0, 1), torch::kCPU, 1));
}

}  // namespace
}  // namespace zest::testing
