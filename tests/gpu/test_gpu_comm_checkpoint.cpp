// NCCL collectives (grouped, in place, bf16/fp32, sum/avg/accumulate), the watchdog that names the rank
// that never arrived, and checkpoints saved on the GPU resuming on the CPU and back (ctest label `gpu`).
#include "checkpoint/load.h"
#include "checkpoint/save.h"
#include "comm/device_communicator.h"
#include "comm/collective_timeout.h"
#include "comm/world.h"
#include "common/temp_dir.h"
#include "engine/engine.h"
#include "../engine/toy_models.h"

#include <c10/core/impl/VirtualGuardImpl.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

namespace zest::testing {
namespace {

torch::Device my_gpu(const Communicator& comm) { return torch::Device(torch::kCUDA, comm.local_rank()); }

TEST(DistNccl, GroupedCollectivesInBf16AndFp32) {
  auto control = world_communicator();
  const torch::Device gpu = my_gpu(*control);
  c10::impl::VirtualGuardImpl(c10::DeviceType::CUDA).setDevice(gpu);
  auto comm = communicator_for_device(control, gpu);
  const int64_t n = comm->size(), r = comm->rank();
  for (auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    const auto on_gpu = torch::TensorOptions().dtype(dtype).device(gpu);
    std::vector<torch::Tensor> inputs, outputs;
    for (int64_t i = 0; i < 3; ++i) {
      inputs.push_back(torch::arange(n * (4 + i), on_gpu) + r);
      outputs.push_back(torch::full({4 + i}, 5.0, on_gpu));
    }
    comm->reduce_scatter_many(inputs, outputs, ReduceOp::sum, /*accumulate=*/true)->wait();
    for (int64_t i = 0; i < 3; ++i) {
      const auto slice = torch::arange(r * (4 + i), (r + 1) * (4 + i), torch::kFloat64);
      const auto expected_sum = 5.0 + slice * n + n * (n - 1) / 2.0;
      EXPECT_TRUE(outputs[i].to(torch::kCPU, torch::kFloat64).allclose(expected_sum, 1e-2)) << "accumulated " << i;
    }
    comm->reduce_scatter_many(inputs, outputs, ReduceOp::avg)->wait();
    for (int64_t i = 0; i < 3; ++i) {
      const auto slice = torch::arange(r * (4 + i), (r + 1) * (4 + i), torch::kFloat64);
      EXPECT_TRUE(outputs[i].to(torch::kCPU, torch::kFloat64).allclose(slice + (n - 1) / 2.0, 1e-2)) << "avg " << i;
    }
    // In place: each rank's slot of the output is its input.
    auto full = torch::zeros({n * 8}, on_gpu);
    full.narrow(0, r * 8, 8).fill_(static_cast<double>(r + 1));
    comm->allgather_many({full.narrow(0, r * 8, 8)}, {full})->wait();
    for (int64_t q = 0; q < n; ++q) {
      EXPECT_TRUE(full.narrow(0, q * 8, 8).to(torch::kCPU).eq(q + 1).all().item<bool>()) << "slot " << q;
    }
    auto sums = torch::full({16}, static_cast<double>(r + 1), on_gpu);
    comm->allreduce_many({sums}, ReduceOp::sum)->wait();
    EXPECT_TRUE(sums.to(torch::kCPU, torch::kFloat64).eq(n * (n + 1) / 2.0).all().item<bool>());
  }
}

// Child side of the watchdog test (run by the parent below under mpirun -np 2): rank 1 never joins the
// allreduce rank 0 issues.
TEST(WatchdogChild, RankOneNeverArrives) {
  if (std::getenv("ZEST_WATCHDOG_CHILD") == nullptr) GTEST_SKIP() << "run by GpuWatchdog";
  auto control = world_communicator();
  const torch::Device gpu = my_gpu(*control);
  c10::impl::VirtualGuardImpl(c10::DeviceType::CUDA).setDevice(gpu);
  auto comm = communicator_for_device(control, gpu);
  if (comm->rank() == 1) {
    std::this_thread::sleep_for(std::chrono::seconds(40));
    return;
  }
  const CollectiveLabel label("the watchdog test's bucket");
  auto t = torch::ones({1 << 20}, torch::TensorOptions().device(gpu));
  comm->allreduce(t, ReduceOp::sum)->wait();
  torch::cuda::synchronize(gpu.index());  // hangs until the watchdog ends the process
  FAIL() << "the allreduce completed without rank 1";
}

TEST(GpuWatchdog, NamesTheRankThatNeverArrives) {
  if (torch::cuda::device_count() < 2) GTEST_SKIP() << "needs 2 GPUs";
  const std::string self = std::string(ZEST_BINARY_DIR) + "/tests/test_gpu";
  const std::string command = "ZEST_WATCHDOG_CHILD=1 ZEST_COMM_TIMEOUT_S=3 timeout 90 mpirun -np 2 --bind-to none " +
                              self + " --gtest_filter=WatchdogChild.* 2>&1 < /dev/null";
  const auto start = std::chrono::steady_clock::now();
  std::FILE* pipe = ::popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string output;
  char buffer[4096];
  while (std::fgets(buffer, sizeof(buffer), pipe) != nullptr) output += buffer;
  const int status = ::pclose(pipe);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(status, 0) << output;
  EXPECT_LT(seconds, 60.0) << output;
  EXPECT_NE(output.find("allreduce"), std::string::npos) << output;
  EXPECT_NE(output.find("the watchdog test's bucket"), std::string::npos) << output;
  EXPECT_NE(output.find("rank(s) that did not arrive: 1"), std::string::npos) << output;
}

// A checkpoint written by a GPU engine resumes on the CPU and the other way round, bit for bit in the
// master weights and optimizer state.
TEST(GpuCheckpoint, SavedOnGpuResumesOnCpuAndBack) {
  auto comm = world_communicator();
  TempDir dir;
  auto run = [&](DeviceKind device, const std::string& load_from, const std::string& save_to, int steps) {
    auto model = std::make_shared<ToyNet>(9);
    EngineConfig ec;
    ec.device = device;
    ec.stage = 2;
    ec.precision = Precision::fp32;
    Engine engine(model, ec, OptimConfig{}, SchedulerConfig{}, comm);
    if (!load_from.empty()) checkpoint::load(engine, {load_from, "toynet", "", true});
    auto [x, y] = toy_batch(1, 8);
    x = x.to(engine.device());
    y = y.to(engine.device());
    for (int i = 0; i < steps; ++i) {
      engine.backward(torch::mse_loss(model->forward(x), y));
      engine.step();
    }
    checkpoint::SaveRequest request;
    request.dir = save_to;
    request.model_name = "toynet";
    checkpoint::save(engine, request);
    return engine.master_shard().to(torch::kCPU).clone();
  };
  const auto gpu_master = run(DeviceKind::cuda, "", dir.sub("gpu"), 3);
  const auto cpu_master = run(DeviceKind::cpu, dir.sub("gpu"), dir.sub("cpu"), 0);
  EXPECT_TRUE(cpu_master.equal(gpu_master));
  const auto back = run(DeviceKind::cuda, dir.sub("cpu"), dir.sub("gpu2"), 0);
  EXPECT_TRUE(back.equal(gpu_master));
}

}  // namespace
}  // namespace zest::testing
