// Engine: the user-facing training API. It flattens a model's units into per-unit buffers, shards
// gradients and optimizer state per the ZeRO stage, reduces gradients unit by unit during backward,
// and applies clipped, loss-scaled optimizer steps on the rank's fp32 master shard.
//
//   zest::Engine engine(model, engine_cfg, optim_cfg, sched_cfg, comm);
//   for (micro-batch) engine.backward(loss_of(model, batch));
//   zest::StepStats stats = engine.step();
#pragma once

#include "engine/bucket_plan.h"
#include "comm/communicator.h"
#include "engine/engine_config.h"
#include "engine/flat_unit.h"
#include "engine/loss_scaler.h"
#include "engine/memory_model.h"
#include "engine/sharding_policy.h"
#include "engine/unit_module.h"
#include "optim/optim_config.h"
#include "optim/optimizer.h"

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <vector>

namespace zest {

struct StepStats {
  int64_t step = 0;          // optimizer updates applied so far (after this call)
  double lr = 0.0;           // learning rate used (0 when skipped)
  double grad_norm = 0.0;    // global norm of the unscaled gradient before clipping (inf/nan if skipped)
  double loss_scale = 1.0;   // scale used for this step's backward passes
  bool skipped = false;      // non-finite gradients: no update anywhere
  int64_t skipped_total = 0;
};

class Engine {
 public:
  // The model declares its units (UnitModule::unit_decls). Parameters are broadcast from rank 0.
  Engine(std::shared_ptr<UnitModule> model, const EngineConfig& engine, const OptimConfig& optim,
         const SchedulerConfig& schedule, std::shared_ptr<Communicator> comm);
  // Any module with an explicit unit list.
  Engine(std::shared_ptr<torch::nn::Module> model, std::vector<UnitDecl> units, const EngineConfig& engine,
         const OptimConfig& optim, const SchedulerConfig& schedule, std::shared_ptr<Communicator> comm);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Backward of one micro-batch's loss (mean over the rank's micro-batch): applies the loss scale and
  // 1/accumulation_steps, launches gradient reductions as units finish.
  void backward(const torch::Tensor& loss);
  // One optimizer step after accumulation_steps backward() calls.
  StepStats step();

  // ---- introspection (checkpoints, tests, tools) ----
  const EngineConfig& config() const { return config_; }
  // Where the model, flat buffers and optimizer state live (inputs go there too).
  torch::Device device() const { return device_; }
  const ShardingPolicy& policy() const { return policy_; }
  Communicator& comm() const { return *comm_; }
  const std::vector<FlatUnit>& units() const { return units_; }
  const std::vector<Bucket>& buckets() const { return buckets_; }
  ElementSpan master_span(size_t unit_idx) const { return master_spans_[unit_idx]; }
  torch::Tensor master_shard() const { return master_; }  // [Σ owned] fp32
  Optimizer& optimizer() { return *optimizer_; }
  LossScaler& loss_scaler() { return scaler_; }
  int64_t step_count() const { return step_count_; }
  void set_step_count(int64_t step) { step_count_ = step; }
  int64_t skipped_total() const { return skipped_total_; }
  void set_skipped_total(int64_t count) { skipped_total_ = count; }  // restored by checkpoint::load
  const SchedulerConfig& schedule_config() const { return schedule_; }
  double current_lr() const;
  // Recomputes the compute-dtype parameters from the master shard (after loading a checkpoint).
  void refresh_params_from_master();
  // Bytes of model state this rank holds (actual buffers) and the formula figure for this setup.
  ModelStateBytes model_state_bytes() const;
  int64_t num_parameters() const;  // P (unique trainable elements, no padding)

 private:
  struct Pending {
    WorkHandle work;
    std::function<void()> then;  // runs after the collective completes
  };
  struct HookTarget;

  void build(torch::nn::Module& model, const std::vector<UnitDecl>& decls);
  void register_grad_hooks();
  void on_param_grad_ready(size_t unit_idx);
  void launch_ready_reductions(bool flush);
  void reduce_bucket(const Bucket& bucket);
  void reduce_unit(size_t unit_idx);
  bool is_unit_complete(size_t unit_idx) const;
  void wait_pending();
  torch::Tensor owned_grad(size_t unit_idx) const;
  std::string first_nonfinite_param();
  void zero_grads();
  bool is_boundary_micro_step() const;

  EngineConfig config_;
  OptimConfig optim_config_;
  SchedulerConfig schedule_;
  ShardingPolicy policy_;
  std::shared_ptr<Communicator> comm_;
  std::shared_ptr<torch::nn::Module> model_;
  torch::Device device_ = torch::kCPU;
  torch::Dtype compute_dtype_;
  torch::Dtype reduce_dtype_;

  std::vector<FlatUnit> units_;
  std::vector<ElementSpan> master_spans_;  // unit's span in master_/grad_shard_/optimizer state
  std::vector<std::vector<ElementRange>> decay_ranges_;  // per unit, relative to its master span
  std::vector<Bucket> buckets_;            // units fused into one collective (engine.bucket_mb)
  torch::Tensor master_;                   // [Σ owned] fp32
  torch::Tensor grad_shard_;               // [Σ owned] reduce dtype (stage 2 only)
  std::unique_ptr<Optimizer> optimizer_;
  LossScaler scaler_;

  // Backward bookkeeping (reset every micro-step). Reductions are launched in reverse unit order on
  // every rank, so collectives match across ranks even if units finish in a different order.
  std::vector<int> grads_ready_;     // per unit: parameters whose gradient has been accumulated
  std::vector<char> unit_reduced_;   // per unit: reduction launched this micro-step
  int next_bucket_ = -1;             // buckets are launched from the last to the first
  bool reduce_this_micro_step_ = false;
  std::vector<Pending> pending_;
  std::shared_ptr<HookTarget> hook_target_;
  std::vector<std::shared_ptr<torch::autograd::Node>> grad_accumulators_;  // keep hooks' nodes alive

  int64_t micro_step_ = 0;  // backward() calls since the last step()
  int64_t step_count_ = 0;  // applied optimizer updates
  int64_t skipped_total_ = 0;
  int consecutive_nonfinite_ = 0;
};

}  // namespace zest
