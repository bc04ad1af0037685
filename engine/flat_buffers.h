// FlatBuffers: the rank's flat tensors on the engine's device — full compute-dtype parameters (stages
// 0–2), the parameter shard (stage 3 with optimizer offload), the gradient shard (stages 2–3 on several
// ranks) and the fp32 master shard, allocated once; and each unit's full gradients (stages 0–1, stages 2–3
// on one rank), whose memory exists only within a step — and every unit's views of them. "Full" tensors
// concatenate the units' padded buffers; "shard" tensors concatenate this rank's slice of each unit (at
// stage 0 the slice is the whole unit, so shard = full layout). The gradient walk's third stop
// (docs/design.md): where a gradient lives before and after its reduction.
#pragma once

#include "engine/sharding_policy.h"
#include "engine/unit.h"

#include <torch/torch.h>

#include <vector>

namespace zest {

struct FlatDtypes {
  torch::Dtype compute = torch::kBFloat16;  // parameters and activations
  torch::Dtype reduce = torch::kFloat32;    // gradients, from autograd's accumulation to the shard
};

class FlatBuffers {
 public:
  // master_on_host: the master shard lives in host memory (optimizer offload).
  FlatBuffers(const std::vector<Unit>& units, const ShardingPolicy& policy, FlatDtypes dtypes, torch::Device device,
              bool master_on_host = false);

  // Views of unit u ([padded_numel] for full tensors, [shard numel] for shard tensors).
  torch::Tensor param_full(size_t u) const;   // stages 0–2
  // This rank's slice of the parameters: its own tensor at stage 3 with the master on the host, the slice
  // inside param_full at stages 0–2 (stages 1–2 update it there and allgather in place), and undefined at
  // stage 3 with the master on the device, where a gather casts master(u) into the rank's slot instead.
  torch::Tensor param_shard(size_t u) const;
  // What this rank gives to gathering unit u into `gathered` (the unit's [padded_numel] buffer): its kept
  // slice, or, with none kept (stage 3, master on the device), its own slot of `gathered` filled with master(u)
  // cast to the compute dtype — the gather then runs in place.
  torch::Tensor gather_input(size_t u, const torch::Tensor& gathered) const;
  // Stages 0–1 (and 2–3 on one rank): the unit's full gradient tensor. Its memory is there only between
  // allocate_grads(u) and release_grads(u) or reset_grads() (views of it stay valid objects throughout).
  torch::Tensor grad_full(size_t u) const;
  torch::Tensor grad_shard(size_t u) const;   // stages 2–3; stages 0–1: the unit's slice of grad_full
  torch::Tensor master(size_t u) const;
  // Writes unit u's full values ([padded_numel], on the device) into what the rank keeps of it: its owned
  // part of the master, and the parameters kept at rest (the full buffer; stage 3: its slice).
  void load_unit(size_t u, const torch::Tensor& values);

  const torch::Tensor& master() const { return master_; }  // [Σ shard] fp32, on the device or the host
  bool has_param_full() const { return param_full_.defined(); }
  // Full gradients live per step, like PyTorch's gradients with zero_grad(set_to_none=True): a unit's
  // memory is allocated (zeroed) when its first gradient of a step arrives and released after the
  // optimizer has read it, so between steps — through the next forward — it is free for activations.
  bool has_per_step_grads() const { return !grad_full_.empty(); }
  bool has_grads(size_t u) const;
  void allocate_grads(size_t u);
  // After the optimizer read unit u's gradients: its per-step memory released (a no-op without any).
  void release_grads(size_t u);
  // After the optimizer: full gradients released, the persistent gradient shard (stages 2–3) zeroed.
  void reset_grads();
  // Bytes of each kind this rank holds (the model-state report); per-step gradients count whole, as they
  // are during every backward and optimizer update.
  int64_t param_bytes() const;
  int64_t grad_bytes() const;
  FlatDtypes dtypes() const { return dtypes_; }
  torch::Device device() const { return device_; }

 private:
  const std::vector<Unit>& units_;
  FlatDtypes dtypes_;
  torch::Device device_;
  std::vector<int64_t> full_offsets_;  // where each unit's padded buffer starts in the full tensors
  torch::Tensor param_full_;   // [Σ padded_numel] compute dtype
  torch::Tensor param_shard_;  // [Σ shard numel] compute dtype (stage 3 with the master on the host)
  std::vector<torch::Tensor> grad_full_;  // per unit [padded_numel] reduce dtype, memory within a step only
  torch::Tensor grad_shard_;   // [Σ shard numel] reduce dtype
  torch::Tensor master_;       // [Σ shard numel] fp32
};

}  // namespace zest
