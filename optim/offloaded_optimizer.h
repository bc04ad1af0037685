// OffloadedOptimizer: ZeRO-Offload ([engine.offload] optimizer = "cpu"). The fp32 master shard (the
// engine's, in pinned host memory) and the optimizer state live in host memory. Each bucket's reduced
// gradient shard is copied device→host on a side stream as soon as its reduction is ordered
// (copy_grads_to_host), while backward goes on; step() waits for the step's decision (norm, clip, skip,
// computed on the device as without offload), updates the master unit by unit with a fused, vectorised,
// multithreaded host AdamW/SGD (worker threads over chunks, in unit order), and sends each unit's new
// compute-dtype values back host→device on the side stream while the workers update the next units. The one host wait of a step is the decision's.
#pragma once

#include "optim/optimizer.h"
#include "optim/side_stream.h"

#include <torch/torch.h>

#include <memory>
#include <vector>

namespace zest {

struct StepScalars;  // optim/step_scalars.h

// One step's numbers for the host update, in fp32 as the update computes.
struct HostUpdate {
  float lr, multiplier, weight_decay, beta1, beta2, eps, step_size, bias_correction2_sqrt, momentum;
  bool nesterov, first_sgd_step;
};

// A piece of one segment with uniform weight decay: the unit of work of the host update's threads.
struct HostChunk {
  size_t segment;
  int64_t begin, end;  // relative to the segment
  bool decay;
};

class OffloadedOptimizer final : public Optimizer {
 public:
  // device_segments: the engine's per-unit views — master in host memory, gradient shard and parameter
  // shard on the device. step_scalars: on the device.
  OffloadedOptimizer(const OptimConfig& config, std::vector<OptimSegment> device_segments, int64_t numel,
                     torch::Tensor step_scalars);

  // Starts copying segments first..last's gradient shards to the host (after the work queued so far).
  // Segments not copied by step() are copied there.
  void copy_grads_to_host(size_t first, size_t last);
  void step() override;
  int64_t state_bytes_per_element() const override { return is_adamw_ ? 8 : (config_.momentum != 0.0 ? 4 : 0); }
  std::vector<std::pair<std::string, torch::Tensor>> state_tensors() const override;
  // The last step's scalars on the host (valid after step()); the EMA reads its gating from here.
  const torch::Tensor& host_scalars() const { return host_scalars_; }
  // Host bytes of the gradient and parameter copies that cross PCIe.
  int64_t staging_bytes() const { return grad_host_.nbytes() + param_host_.nbytes(); }

 private:
  void plan_chunks();
  HostUpdate update_of(const StepScalars& s) const;
  void update_and_upload(const HostUpdate& u);
  void update_chunk(const HostChunk& chunk, const HostUpdate& u);

  bool is_adamw_ = true;
  torch::Tensor grad_host_;     // [numel] reduce dtype, pinned: the reduced gradient shard
  torch::Tensor param_host_;    // [numel] compute dtype, pinned: the updated values on their way back
  torch::Tensor host_scalars_;  // float64 [kStepScalarCount], pinned
  torch::Tensor first_;         // exp_avg (AdamW) or momentum (SGD), fp32 [numel]
  torch::Tensor second_;        // exp_avg_sq (AdamW), fp32 [numel]
  std::vector<char> is_grad_copied_;  // per segment, this step
  std::vector<HostChunk> chunks_;     // every segment's, in segment (forward) order
  std::vector<int64_t> chunks_per_segment_;
  SideStream copies_;
};

}  // namespace zest
