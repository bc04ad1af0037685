// Step traces on a GPU (ctest label `gpu`, profiling/step_trace.h): two traced steps of matrix products, the
// first on the default stream, the second on a side stream, hold their kernels on two streams (pid = the
// GPU, tid = CUPTI's stream id), inside the traced steps' time (the host phases and Kineto's events share
// one clock).
#include "common/temp_dir.h"
#include "profiling/step_trace.h"

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <vector>

namespace zest::testing {
namespace {

TEST(GpuStepTrace, KernelsLieOnTheirStreamInsideTheTracedSteps) {
  const TempDir dir("gpu_step_trace");
  const auto a = torch::randn({2048, 2048}, torch::TensorOptions().device(torch::kCUDA).dtype(torch::kBFloat16));
  torch::cuda::synchronize();
  const c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool();
  StepTrace trace(dir.path(), 0, 1, 1, 2, /*device_kernels=*/true);
  for (int64_t step = 1; step <= 2; ++step) {
    trace.begin_step(step);
    {
      const StepTrace::Phase body = trace.phase("products on a side stream");
      const c10::cuda::CUDAStreamGuard on(step == 1 ? c10::cuda::getDefaultCUDAStream() : side);
      for (int i = 0; i < 3; ++i) (void)a.mm(a);
    }
    torch::cuda::synchronize();
    trace.end_step(step);
  }
  ASSERT_FALSE(trace.written().empty());
  std::ifstream in(trace.written());
  const auto json = nlohmann::json::parse(in);
  double first = 1e300, last = -1e300;
  std::vector<nlohmann::json> kernels;
  for (const auto& e : json["traceEvents"]) {
    if (e["ph"] != "X") continue;
    const std::string name = e["name"];
    if (name.rfind("ProfilerStep#", 0) == 0) {
      first = std::min(first, e["ts"].get<double>());
      last = std::max(last, e["ts"].get<double>() + e["dur"].get<double>());
    }
    if (e["cat"] == "kernel") kernels.push_back(e);
  }
  ASSERT_GE(kernels.size(), 6u) << "3 products per step";
  std::set<int64_t> streams;
  for (const auto& k : kernels) {
    EXPECT_EQ(k["pid"].get<int64_t>(), 0) << k.dump();  // GPU 0
    streams.insert(k["tid"].get<int64_t>());
    EXPECT_GE(k["ts"].get<double>(), first - 1000.0) << k.dump();  // 1 ms of slack between the clocks
    EXPECT_LE(k["ts"].get<double>() + k["dur"].get<double>(), last + 1000.0) << k.dump();
  }
  EXPECT_GE(streams.size(), 2u) << "the default stream and the side stream";
}

}  // namespace
}  // namespace zest::testing
