// CUDA graphs for StepGraphs (see cuda_graph.h): LibTorch's CUDAGraph, captured in thread-local mode (so
// the NCCL watchdog and other threads keep querying their own events) into one pool shared by every
// graph of the run, as only one step runs at a time.
#include "engine/cuda_graph.h"

#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>

#include <optional>
#include <utility>

namespace zest {
namespace {

using PoolId = decltype(std::declval<at::cuda::CUDAGraph&>().pool());  // the allocator's private-pool id
constexpr int kAllPools = 0;  // the caching allocator's StatType::AGGREGATE

class CudaCapturedGraph final : public CapturedGraph {
 public:
  CudaCapturedGraph(PoolId* pool, const std::vector<torch::Generator>& generators)
      : pool_(pool) {
    for (const auto& generator : generators) graph_.register_generator_state(generator);
  }
  void begin_capture() override { graph_.capture_begin(*pool_, cudaStreamCaptureModeThreadLocal); }
  void end_capture() override {
    graph_.capture_end();
    if (pool_->first == 0 && pool_->second == 0) *pool_ = graph_.pool();  // later graphs share it
  }
  void abort_capture() override {
    cudaGraph_t partial = nullptr;
    if (cudaStreamEndCapture(c10::cuda::getCurrentCUDAStream().stream(), &partial) == cudaSuccess && partial)
      cudaGraphDestroy(partial);
    (void)cudaGetLastError();  // an invalidated capture leaves its error behind
  }
  void replay() override { graph_.replay(); }

 private:
  PoolId* pool_;
  at::cuda::CUDAGraph graph_;
};

class CudaGraphDevice final : public GraphDevice {
 public:
  CudaGraphDevice(const torch::Device& device, std::vector<torch::Generator> generators)
      : device_index_(device.index()),
        stream_(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device.index())),
        generators_(std::move(generators)) {}

  void enter() override {
    caller_ = c10::cuda::getCurrentCUDAStream(device_index_);
    at::cuda::CUDAEvent ready;
    ready.record(*caller_);
    ready.block(stream_);
    c10::cuda::setCurrentCUDAStream(stream_);
  }
  void leave() override {
    at::cuda::CUDAEvent done;
    done.record(stream_);
    done.block(*caller_);
    c10::cuda::setCurrentCUDAStream(*caller_);
    caller_.reset();
  }
  void used_on_step_stream(const torch::Tensor& t) override {
    if (t.is_cuda()) t.record_stream(stream_);
  }
  void used_on_caller_stream(const torch::Tensor& t) override {
    if (t.is_cuda() && caller_) t.record_stream(*caller_);
  }
  int64_t release_cached_memory() override {
    c10::cuda::device_synchronize();
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device_index_);
    const int64_t cached = stats.reserved_bytes[kAllPools].current - stats.allocated_bytes[kAllPools].current;
    c10::cuda::CUDACachingAllocator::emptyCache();
    return cached;
  }
  int64_t reserved_bytes() const override {
    return c10::cuda::CUDACachingAllocator::getDeviceStats(device_index_).reserved_bytes[kAllPools].current;
  }
  std::unique_ptr<CapturedGraph> new_graph() override {
    return std::make_unique<CudaCapturedGraph>(&pool_, generators_);
  }

 private:
  const c10::DeviceIndex device_index_;
  const c10::cuda::CUDAStream stream_;
  const std::vector<torch::Generator> generators_;
  std::optional<c10::cuda::CUDAStream> caller_;
  PoolId pool_{0, 0};
};

}  // namespace

std::unique_ptr<GraphDevice> make_graph_device(const torch::Device& device, std::vector<torch::Generator> generators) {
  return std::make_unique<CudaGraphDevice>(device, std::move(generators));
}

}  // namespace zest
