// OffloadedOptimizer: ZeRO-Offload ([engine.offload] optimizer = "cpu"). The fp32 master shard (the
// engine's, in host memory) and the optimizer state live in host memory; the reduced gradient shard
// stays on the device. step() waits for the step's decision (norm, clip, skip: computed on the device as
// without offload), then streams the shard through a small ring of page-locked buffers (StagingRing):
// piece by piece, the gradients go down, worker threads update the master with the configured rule's
// fused, vectorised host pass (optim/host_update.h), and the new compute-dtype values go back up, all three overlapped. The host holds the
// master and optimizer state and a fixed few hundred MB of staging, not copies of the shard.
#pragma once

#include "optim/optimizer.h"
#include "optim/staging_ring.h"

#include <torch/torch.h>

#include <memory>
#include <vector>

namespace zest {


// A contiguous range of one segment that crosses PCIe as one copy through one staging slot.
struct HostPiece {
  size_t segment;
  int64_t begin, end;  // relative to the segment
};

// A range of one piece with uniform weight decay: the unit of work of the host update's threads.
struct HostChunk {
  size_t piece;
  int64_t begin, end;  // relative to the segment
  bool decay;
};

class OffloadedOptimizer final : public Optimizer {
 public:
  // device_segments: the engine's per-unit views — master in host memory, gradient shard and parameter
  // shard on the device. step_scalars: on the device. staging_bytes: the ring's size, all slots together.
  OffloadedOptimizer(const OptimConfig& config, std::vector<OptimSegment> device_segments, int64_t numel,
                     torch::Tensor step_scalars, int64_t staging_bytes);

  // Starts copying the first pieces of the gradient shard to the host, after the work queued so far
  // (the engine calls it once the reductions are ordered, before the norm; step() calls it otherwise).
  void start_downloads();
  // Every segment at once only (the config refuses optimizer_in_backward with offload).
  void step_segments(size_t first, size_t end) override;
  // The last step's scalars on the host (valid after step()); the EMA reads its gating from here.
  const torch::Tensor& host_scalars() const { return host_scalars_; }
  // Host bytes of the staging ring the gradient and parameter pieces cross PCIe through.
  int64_t staging_bytes() const { return ring_->bytes(); }

 private:
  void plan_pieces(int64_t piece_numel);
  void stream_update(const StepValues& step);
  void update_chunk(const HostChunk& chunk, const StepValues& step);
  int slot_of(size_t piece) const { return static_cast<int>(piece % static_cast<size_t>(ring_->slots())); }
  void download(size_t piece);

  torch::Dtype grad_dtype_ = torch::kFloat32;
  torch::Dtype param_dtype_ = torch::kFloat32;
  torch::Tensor host_scalars_;  // float64 [kStepScalarCount], pinned
  std::vector<HostPiece> pieces_;  // every segment's, in segment (forward) order
  std::vector<HostChunk> chunks_;  // every piece's, in piece order
  std::vector<int64_t> chunks_per_piece_;
  std::unique_ptr<StagingRing> ring_;
  std::vector<SideStream::Mark> downloaded_;  // per piece: its download this step
  size_t downloads_issued_ = 0;               // this step
};

}  // namespace zest
