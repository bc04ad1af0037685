// The CUDA optimizer: builds the chunk table of the rank's segments once (the buffers are persistent, so
// the pointers never change), keeps it on the device, and runs one fused kernel per step on the current
// stream (see fused_optimizer.h).
#include "core/check.h"
#include "optim/fused_optimizer.h"
#include "optim/optimizer.h"

#include <c10/cuda/CUDAStream.h>

#include <cstring>

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
  for (const auto& seg : segments) {
    for (const auto& [range, decay] : decay_runs(seg)) {
      for (int64_t c = range.begin; c < range.end; c += kFusedChunkNumel) {
        FusedChunk chunk;
        chunk.state_offset = seg.offset + c;
        chunk.numel = std::min(kFusedChunkNumel, range.end - c);
        chunk.grad = static_cast<const char*>(seg.grad.data_ptr()) + c * seg.grad.element_size();
        chunk.param = static_cast<char*>(seg.param.data_ptr()) + c * seg.param.element_size();
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
      : Optimizer(config, std::move(segments), std::move(scalars)) {
    const auto options = torch::TensorOptions().dtype(torch::kFloat32).device(scalars_.device());
    is_adamw_ = config_.name == OptimizerKind::adamw;
    first_ = torch::zeros({numel}, options);
    if (is_adamw_) second_ = torch::zeros({numel}, options);
    ZEST_CHECK(segments_.empty() || segments_.front().offset == 0, "fused optimizer: segments must start at 0");
    master_ = segments_.empty() ? torch::Tensor() : base_of(segments_.front().master, numel);
    const auto chunks = chunk_table(segments_);
    num_chunks_ = static_cast<int64_t>(chunks.size());
    chunks_ = upload(chunks, scalars_.device());
    if (!segments_.empty()) {
      grad_dtype_ = fused_dtype(segments_.front().grad.scalar_type(), "gradient");
      param_dtype_ = fused_dtype(segments_.front().param.scalar_type(), "parameter");
    }
    hyper_.beta1 = static_cast<float>(config_.beta1);
    hyper_.beta2 = static_cast<float>(config_.beta2);
    hyper_.eps = static_cast<float>(config_.eps);
    hyper_.weight_decay = static_cast<float>(config_.weight_decay);
    hyper_.momentum = static_cast<float>(config_.momentum);
    hyper_.nesterov = config_.nesterov;
  }

  void step() override {
    if (num_chunks_ == 0) return;
    const auto* chunks = static_cast<const FusedChunk*>(chunks_.data_ptr());
    const auto* scalars = scalars_.data_ptr<double>();
    void* stream = c10::cuda::getCurrentCUDAStream(scalars_.device().index()).stream();
    if (is_adamw_) {
      launch_fused_adamw(chunks, num_chunks_, master_.data_ptr<float>(), first_.data_ptr<float>(),
                         second_.data_ptr<float>(), scalars, hyper_, grad_dtype_, param_dtype_, stream);
    } else {
      launch_fused_sgd(chunks, num_chunks_, master_.data_ptr<float>(), first_.data_ptr<float>(), scalars, hyper_,
                       grad_dtype_, param_dtype_, stream);
    }
  }
  int64_t state_bytes_per_element() const override { return is_adamw_ ? 8 : (config_.momentum != 0.0 ? 4 : 0); }
  std::vector<std::pair<std::string, torch::Tensor>> state_tensors() const override {
    if (is_adamw_) return {{"exp_avg", first_}, {"exp_avg_sq", second_}};
    return {{"momentum", first_}};
  }

 private:
  // The whole master shard the first segment's view starts (the segments tile it from offset 0).
  static torch::Tensor base_of(const torch::Tensor& first_view, int64_t numel) {
    ZEST_CHECK(first_view.is_contiguous(), "fused optimizer: the master shard must be contiguous");
    return torch::from_blob(first_view.data_ptr(), {numel}, first_view.options());
  }

  bool is_adamw_ = true;
  torch::Tensor first_;   // [numel] fp32: exp_avg (AdamW) or momentum (SGD)
  torch::Tensor second_;  // [numel] fp32: exp_avg_sq (AdamW)
  torch::Tensor master_;  // [numel] fp32, the master shard (a view: the engine owns it)
  torch::Tensor chunks_;  // FusedChunk[num_chunks_] as bytes, on the device
  int64_t num_chunks_ = 0;
  FusedDtype grad_dtype_ = FusedDtype::fp32;
  FusedDtype param_dtype_ = FusedDtype::fp32;
  FusedHyper hyper_;
};

}  // namespace

std::unique_ptr<Optimizer> make_fused_cuda_optimizer(const OptimConfig& config, std::vector<OptimSegment> segments,
                                                     int64_t numel, torch::Tensor step_scalars) {
  return std::make_unique<FusedCudaOptimizer>(config, std::move(segments), numel, std::move(step_scalars));
}

}  // namespace zest
