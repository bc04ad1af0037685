// OffloadedOptimizer (see offloaded_optimizer.h): the pieces' trip through the staging ring, and the host
// update — one pass of the configured rule over each piece's elements (the host pass the CPU optimizer
// runs too), in chunks spread over as many threads as the rank's intra-op threads.
#include "optim/offloaded_optimizer.h"

#include "core/check.h"
#include "optim/host_update.h"
#include "optim/pinned_memory.h"
#include "engine/step_scalars.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <limits>
#include <thread>

namespace zest {

OffloadedOptimizer::OffloadedOptimizer(const OptimConfig& config, std::vector<OptimSegment> device_segments,
                                       int64_t numel, torch::Tensor step_scalars, int64_t staging_bytes)
    // The state never crosses PCIe: pageable host memory.
    : Optimizer(config, std::move(device_segments), std::move(step_scalars), numel, torch::TensorOptions()) {
  const torch::Device device = scalars_.device();  // the staging buffers cross PCIe: page-locked for a GPU
  if (!segments_.empty()) {
    grad_dtype_ = segments_.front().grad.scalar_type();
    param_dtype_ = segments_.front().param.scalar_type();
  }
  int64_t largest_segment = 0;
  for (const auto& seg : segments_) {
    ZEST_CHECK(seg.master.device().is_cpu(), "offloaded optimizer: the master shard must be in host memory");
    ZEST_CHECK(seg.grad.scalar_type() == grad_dtype_ && seg.param.scalar_type() == param_dtype_,
               "offloaded optimizer: every segment must share the gradient and parameter dtypes");
    largest_segment = std::max(largest_segment, seg.master.numel());
  }
  // Other dtypes are refused here, not mid-step.
  ZEST_CHECK(is_host_update_dtype(grad_dtype_) && is_host_update_dtype(param_dtype_), "offloaded optimizer: gradient ",
             grad_dtype_, " and parameter ", param_dtype_, " dtypes must each be fp32, bf16 or fp16");
  const auto element_bytes = static_cast<int64_t>(torch::elementSize(grad_dtype_) + torch::elementSize(param_dtype_));
  const int64_t piece_numel = staging_slot_numel(staging_bytes, element_bytes, largest_segment);
  plan_pieces(piece_numel);
  downloaded_.resize(pieces_.size());
  const int slots = static_cast<int>(std::clamp<size_t>(pieces_.size(), 1, kStagingSlots));
  ring_ = std::make_unique<StagingRing>(slots, piece_numel, grad_dtype_, param_dtype_, device);
  host_scalars_ = zeroed_host_tensor(kStepScalarCount, torch::kFloat64, device);
}

void OffloadedOptimizer::download(size_t piece) {
  const HostPiece& p = pieces_[piece];
  downloaded_[piece] = ring_->download(slot_of(piece), segments_[p.segment].grad.narrow(0, p.begin, p.end - p.begin));
}

void OffloadedOptimizer::start_downloads() {
  torch::NoGradGuard no_grad;
  const size_t first_pieces = std::min(pieces_.size(), static_cast<size_t>(ring_->slots()));
  for (; downloads_issued_ < first_pieces; ++downloads_issued_) download(downloads_issued_);
}

void OffloadedOptimizer::step_segments(size_t first, size_t end) {
  ZEST_CHECK(first == 0 && end == segments_.size(), "the offloaded optimizer updates every segment in one step "
             "(engine.optimizer_in_backward does not go with [engine.offload] optimizer = \"cpu\")");
  torch::NoGradGuard no_grad;
  start_downloads();
  // The one wait for the device: the decision, while the first pieces go down.
  host_scalars_.copy_(scalars_);
  const StepScalars& s = *reinterpret_cast<const StepScalars*>(host_scalars_.data_ptr<double>());
  if (s.skip == 0.0) stream_update(step_values(s));
  downloads_issued_ = 0;
  // The gathers and the next forward read the parameters after their upload; the gradients are zeroed
  // after their download.
  ring_->join();
}

// The calling thread moves the pieces through the ring — publishes a piece to the workers once its
// gradients are on the host and its slot's parameter half is free, uploads it once its chunks are done,
// and downloads the piece that slot takes next — while worker threads update the published pieces'
// chunks in order.
void OffloadedOptimizer::stream_update(const StepValues& step) {
  const size_t n = pieces_.size();
  const size_t slots = static_cast<size_t>(ring_->slots());
  constexpr size_t kStop = std::numeric_limits<size_t>::max();
  std::vector<std::atomic<int64_t>> chunks_left(n);
  for (size_t p = 0; p < n; ++p) chunks_left[p].store(chunks_per_piece_[p]);
  std::atomic<size_t> published{0};  // pieces [0, published) may be updated; kStop: give up
  std::atomic<size_t> next_chunk{0};
  auto work = [&] {
    for (size_t c = next_chunk.fetch_add(1); c < chunks_.size(); c = next_chunk.fetch_add(1)) {
      const size_t piece = chunks_[c].piece;
      size_t ready = published.load();
      for (; ready != kStop && ready <= piece; ready = published.load()) published.wait(ready);
      if (ready == kStop) return;
      update_chunk(chunks_[c], step);
      chunks_left[piece].fetch_sub(1);
    }
  };
  std::vector<std::jthread> workers;
  const int threads = std::max(1, at::get_num_threads());
  for (int t = 0; t < threads; ++t) workers.emplace_back(work);
  try {
    size_t ready = 0, uploaded = 0;
    while (uploaded < n) {
      bool progressed = false;
      if (ready < downloads_issued_ && downloaded_[ready].is_reached() && ring_->is_param_free(slot_of(ready))) {
        published.store(++ready);
        published.notify_all();
        progressed = true;
      }
      if (uploaded < ready && chunks_left[uploaded].load() == 0) {
        const HostPiece& p = pieces_[uploaded];
        ring_->upload(slot_of(uploaded), segments_[p.segment].param.narrow(0, p.begin, p.end - p.begin));
        ++uploaded;
        progressed = true;
      }
      // A slot's gradient half is free once its previous piece is updated (uploaded, here).
      if (downloads_issued_ < n && downloads_issued_ < uploaded + slots) {
        download(downloads_issued_++);
        progressed = true;
      }
      if (!progressed) std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  } catch (...) {
    published.store(kStop);
    published.notify_all();
    throw;
  }
}

void OffloadedOptimizer::update_chunk(const HostChunk& chunk, const StepValues& step) {
  const HostPiece& piece = pieces_[chunk.piece];
  const OptimSegment& seg = segments_[piece.segment];
  const int slot = slot_of(chunk.piece);
  const int64_t in_slot = chunk.begin - piece.begin;
  const int64_t at = seg.in_flat.begin + chunk.begin;  // in the flat state buffers
  const HostRange range{seg.master.data_ptr<float>() + chunk.begin,
                        {state_at(0, at), state_at(1, at)},
                        ring_->grad_at(slot, in_slot),
                        grad_dtype_,
                        ring_->param_at(slot, in_slot),
                        param_dtype_,
                        chunk.end - chunk.begin};
  host_update(config_.name, hyper_, step, chunk.decay, range);
}

// Each segment cut into pieces of at most `piece_numel`; each piece into chunks of uniform weight decay,
// small enough to spread a piece over every thread.
void OffloadedOptimizer::plan_pieces(int64_t piece_numel) {
  constexpr int64_t kChunkNumel = 1 << 16;
  for (size_t i = 0; i < segments_.size(); ++i) {
    const OptimSegment& seg = segments_[i];
    const int64_t n = seg.master.numel();
    const std::vector<DecayRun> runs = decay_runs(seg);
    for (int64_t begin = 0; begin < n; begin += piece_numel) {
      const int64_t end = std::min(n, begin + piece_numel);
      const size_t piece = pieces_.size();
      pieces_.push_back({i, begin, end});
      int64_t count = 0;
      for (const auto& [range, decay] : runs) {
        const int64_t from = std::max(range.begin, begin), to = std::min(range.end(), end);
        for (int64_t b = from; b < to; b += kChunkNumel) {
          chunks_.push_back({piece, b, std::min(to, b + kChunkNumel), decay});
          ++count;
        }
      }
      chunks_per_piece_.push_back(count);
    }
  }
}

}  // namespace zest
