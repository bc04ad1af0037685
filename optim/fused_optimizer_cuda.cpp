// The CUDA optimizer: builds the chunk table of the rank's segments once and keeps it on the device; each
// step writes the segments' current gradient pointers (the engine's per-step gradients move between
// steps) and runs one fused kernel on the current stream with the configured rule (see fused_optimizer.h),
// over every segment or over a run of them (one bucket, when the engine updates during backward).
#include "core/check.h"
#include "optim/fused_optimizer.h"
#include "optim/optimizer.h"

#include <c10/cuda/CUDAStream.h>

#include <cstring>
#include <numeric>

namespace zest {
namespace {

FusedDtype fused_dtype(torch::Dtype dtype, const char* what) {
  switch (dtype) {
    case torch::kFloat32: return FusedDtype::fp32;
    case torch::kBFloat16: return FusedDtype::bf16;
    case torch::kFloat16: return FusedDtype::fp16;
    default: ZEST_FAIL("fused optimizer: ", what, " dtype ", dtype, " is not fp32, bf16 or fp16");
  }
}

// Splits every segment at its decay boundaries and into pieces of at most kFusedChunkNumel elements.
std::vector<FusedChunk> chunk_table(const std::vector<OptimSegment>& segments) {
  std::vector<FusedChunk> chunks;
  for (size_t s = 0; s < segments.size(); ++s) {
    const OptimSegment& seg = segments[s];
    for (const auto& [range, decay] : decay_runs(seg)) {
      for (int64_t c = range.begin; c < range.end(); c += kFusedChunkNumel) {
        FusedChunk chunk;
        chunk.state_offset = seg.in_flat.begin + c;
        chunk.numel = std::min(kFusedChunkNumel, range.end() - c);
        chunk.grad_offset = c;
        chunk.segment = static_cast<int32_t>(s);
        chunk.param = seg.param.defined() ? static_cast<char*>(seg.param.data_ptr()) + c * seg.param.element_size()
                                          : nullptr;  // no parameter copy kept: the kernel writes none
        chunk.decay = decay ? 1.0f : 0.0f;
        chunks.push_back(chunk);
      }
    }
  }
  return chunks;
}

torch::Tensor upload(const std::vector<FusedChunk>& chunks, const torch::Device& device) {
  auto host = torch::empty({static_cast<int64_t>(chunks.size() * sizeof(FusedChunk))}, torch::kUInt8);
  if (!chunks.empty()) std::memcpy(host.data_ptr(), chunks.data(), chunks.size() * sizeof(FusedChunk));
  return host.to(device);
}

class FusedCudaOptimizer final : public Optimizer {
 public:
  FusedCudaOptimizer(const OptimConfig& config, std::vector<OptimSegment> segments, int64_t numel,
                     torch::Tensor scalars)
      : Optimizer(config, std::move(segments), scalars, numel, torch::TensorOptions().device(scalars.device())) {
    ZEST_CHECK(segments_.empty() || segments_.front().in_flat.begin == 0, "fused optimizer: segments must start at 0");
    master_ = segments_.empty() ? torch::Tensor() : base_of(segments_.front().master, numel);
    const auto chunks = chunk_table(segments_);
    num_chunks_ = static_cast<int64_t>(chunks.size());
    chunks_ = upload(chunks, scalars_.device());
    // Each segment's chunks are consecutive in the table: [first_chunk_[s], first_chunk_[s + 1]).
    first_chunk_.assign(segments_.size() + 1, 0);
    for (const FusedChunk& chunk : chunks) ++first_chunk_[chunk.segment + 1];
    std::partial_sum(first_chunk_.begin(), first_chunk_.end(), first_chunk_.begin());
    grad_pointers_ = torch::empty({static_cast<int64_t>(segments_.size())},
                                  torch::TensorOptions().dtype(torch::kInt64).device(scalars_.device()));
    if (!segments_.empty()) {
      grad_dtype_ = fused_dtype(segments_.front().grad.scalar_type(), "gradient");
      const torch::Tensor& param = segments_.front().param;
      if (param.defined()) param_dtype_ = fused_dtype(param.scalar_type(), "parameter");
    }
  }

  void step_segments(size_t first, size_t end) override {
    const int64_t chunk_begin = first_chunk_[first];
    const int64_t chunk_count = first_chunk_[end] - chunk_begin;
    if (chunk_count == 0) return;
    const auto* chunks = static_cast<const FusedChunk*>(chunks_.data_ptr()) + chunk_begin;
    const auto* scalars = scalars_.data_ptr<double>();
    void* stream = c10::cuda::getCurrentCUDAStream(scalars_.device().index()).stream();
    float* const state[kMaxStates] = {state_at(0, 0), state_at(1, 0)};
    // The table keeps one entry per segment; only these segments' entries are (re)written: their chunks
    // read no other.
    std::vector<const void*> grads;
    grads.reserve(end - first);
    for (size_t seg = first; seg < end; ++seg) grads.push_back(segments_[seg].grad.data_ptr());
    auto* table = reinterpret_cast<const void**>(grad_pointers_.data_ptr());
    launch_store_pointers(table + first, grads.data(), static_cast<int64_t>(grads.size()), stream);
    launch_fused_update(config_.name, chunks, chunk_count, table, master_.data_ptr<float>(), state, scalars, hyper_,
                        grad_dtype_, param_dtype_, stream);
  }

 private:
  // The whole master shard the first segment's view starts (the segments tile it from offset 0).
  static torch::Tensor base_of(const torch::Tensor& first_view, int64_t numel) {
    ZEST_CHECK(first_view.is_contiguous(), "fused optimizer: the master shard must be contiguous");
    return torch::from_blob(first_view.data_ptr(), {numel}, first_view.options());
  }

  torch::Tensor master_;  // [numel] fp32, the master shard (a view: the engine owns it)
  torch::Tensor chunks_;  // FusedChunk[num_chunks_] as bytes, on the device
  torch::Tensor grad_pointers_;  // [segments] the segments' gradient pointers, rewritten every step
  int64_t num_chunks_ = 0;
  std::vector<int64_t> first_chunk_;  // [segments + 1]: each segment's first chunk, then num_chunks_
  FusedDtype grad_dtype_ = FusedDtype::fp32;
  FusedDtype param_dtype_ = FusedDtype::fp32;
};

}  // namespace

std::unique_ptr<Optimizer> make_fused_cuda_optimizer(const OptimConfig& config, std::vector<OptimSegment> segments,
                                                     int64_t numel, torch::Tensor step_scalars) {
  return std::make_unique<FusedCudaOptimizer>(config, std::move(segments), numel, std::move(step_scalars));
}

}  // namespace zest
