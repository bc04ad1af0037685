// CUDA graphs for StepGraphs (see cuda_graph.h): LibTorch's CUDAGraph, captured in thread-local mode (so
// the NCCL watchdog and other threads keep querying their own events) into one pool shared by every
// graph of the run, as only one step runs at a time.
#include "engine/cuda_graph.h"

#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>

#include <cstdlib>
#include <iostream>
#include <map>
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
  void begin_capture(int64_t pool_bytes) override {
    graph_.capture_begin(*pool_, cudaStreamCaptureModeThreadLocal);
    // Allocated and freed at once: no kernel is recorded, the pool keeps the block free for the step.
    if (pool_bytes > 0)
      (void)at::empty({pool_bytes}, at::TensorOptions().dtype(at::kByte).device(at::kCUDA, c10::cuda::current_device()));
  }
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

// Measurement only (this session): the caching allocator's segments holding free memory after emptyCache.
void print_segments_with_free_memory() {
  const auto snapshot = c10::cuda::CUDACachingAllocator::snapshot();
  int64_t stranded = 0;
  for (const auto& segment : snapshot.segments) {
    const int64_t free_bytes = static_cast<int64_t>(segment.total_size) - static_cast<int64_t>(segment.allocated_size);
    stranded += free_bytes;
    if (free_bytes < (32 << 20)) continue;
    std::cerr << "segment " << segment.total_size / 1048576.0 << " MiB, allocated " << segment.allocated_size / 1048576.0
              << " MiB, stream " << segment.stream << ", pool " << segment.owner_private_pool_id.first << ":"
              << segment.owner_private_pool_id.second << ", blocks:";
    int shown = 0;
    for (const auto& block : segment.blocks) {
      if (shown++ < 24) std::cerr << " " << (block.allocated ? "+" : "-") << block.size / 1048576.0;
    }
    std::cerr << (segment.blocks.size() > 24 ? " ..." : "") << "\n";
  }
  std::cerr << "free memory in segments after emptyCache: " << stranded / 1073741824.0 << " GiB in "
            << snapshot.segments.size() << " segments\n";
  int64_t live = 0;
  std::map<int64_t, int> live_sizes;  // MiB -> count, the live blocks of every segment
  for (const auto& segment : snapshot.segments)
    for (const auto& block : segment.blocks)
      if (block.allocated) {
        live += static_cast<int64_t>(block.size);
        ++live_sizes[static_cast<int64_t>(block.size >> 20)];
      }
  std::cerr << "live: " << live / 1073741824.0 << " GiB; by MiB:";
  for (auto it = live_sizes.rbegin(); it != live_sizes.rend(); ++it) std::cerr << " " << it->first << "x" << it->second;
  std::cerr << "\n";
}

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
    if (std::getenv("ZEST_MEMORY_SEGMENTS")) print_segments_with_free_memory();  // measurement only
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
