// OffloadedOptimizer: ZeRO-Offload ([engine.offload] optimizer = "cpu"). The fp32 master shard (the
// engine's, in pinned host memory) and the optimizer state live in host memory. Each bucket's reduced
// gradient shard is copied device→host on a side stream as soon as its reduction is ordered
// (copy_grads_to_host), while backward goes on; step() waits for the step's decision (norm, clip, skip,
// computed on the device as without offload), updates the master unit by unit with a fused, vectorised,
// multithreaded host AdamW/SGD, and sends each unit's new compute-dtype values back host→device on the
// side stream while the host updates the next unit. The one host wait of a step is the decision's.
#pragma once

#include "optim/optimizer.h"
#include "optim/side_stream.h"

#include <torch/torch.h>

#include <memory>
#include <vector>

namespace zest {

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
  void update_on_host(size_t segment_idx);

  bool is_adamw_ = true;
  torch::Tensor grad_host_;     // [numel] reduce dtype, pinned: the reduced gradient shard
  torch::Tensor param_host_;    // [numel] compute dtype, pinned: the updated values on their way back
  torch::Tensor host_scalars_;  // float64 [kStepScalarCount], pinned
  torch::Tensor first_;         // exp_avg (AdamW) or momentum (SGD), fp32 [numel]
  torch::Tensor second_;        // exp_avg_sq (AdamW), fp32 [numel]
  std::vector<char> is_grad_copied_;  // per segment, this step
  SideStream copies_;
};

}  // namespace zest
