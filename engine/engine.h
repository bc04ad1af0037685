// Engine: the user-facing training API. It places a model's units in flat buffers on its device, shards
// gradients, parameters and optimizer state per the ZeRO stage, reduces gradients bucket by bucket during
// backward, and applies clipped, loss-scaled optimizer steps on the rank's fp32 master shard — on a GPU
// without the host ever waiting for the device inside a step.
//
//   zest::Engine engine(model, engine_cfg, optim_cfg, sched_cfg, comm);
//   for (micro-batch) engine.backward(loss_of(model, batch));
//   engine.step();
//   if (logging) zest::StepStats stats = engine.read_stats();   // the host reads numbers here only
#pragma once

#include "comm/communicator.h"
#include "engine/bucket.h"
#include "engine/bucket_plan.h"
#include "engine/engine_config.h"
#include "engine/engine_state.h"
#include "engine/flat_buffers.h"
#include "engine/grad_reducer.h"
#include "engine/loss_scaler.h"
#include "engine/memory_model.h"
#include "engine/param_residency.h"
#include "engine/preflight.h"
#include "engine/sharding_policy.h"
#include "engine/step_outcome.h"
#include "engine/unit.h"
#include "engine/unit_hooks.h"
#include "engine/unit_module.h"
#include "engine/update_in_backward.h"
#include "optim/ema.h"
#include "optim/offloaded_optimizer.h"
#include "optim/optim_config.h"
#include "optim/optimizer.h"
#include "engine/step_scalars.h"

#include <torch/torch.h>

#include <memory>
#include <vector>

namespace zest {

class CheckpointRunner;

struct StepStats {
  int64_t step = 0;           // step() calls so far, skipped ones included
  int64_t applied_steps = 0;  // optimizer updates applied (the schedule's position)
  double lr = 0.0;            // learning rate of the last update (0 when skipped)
  double grad_norm = 0.0;     // of the unscaled, averaged gradient before clipping (inf/nan if skipped)
  double loss_scale = 1.0;    // scale the last step's backward passes used
  bool skipped = false;       // non-finite gradients: no update anywhere
  int64_t skipped_total = 0;
};

class Engine final : public StatefulEngine, private UnitEvents {
 public:
  // The model declares its units (UnitModule::unit_decls) and runs them through run_unit(), so the engine
  // sees each unit's forward and backward. Parameters are broadcast from rank 0.
  Engine(std::shared_ptr<UnitModule> model, const EngineConfig& engine, const OptimConfig& optim,
         const SchedulerConfig& schedule, std::shared_ptr<Communicator> comm);
  // Any module with an explicit unit list (no run_unit: reductions start when a unit's parameters have
  // all accumulated, parameters are gathered eagerly; stages 0–2).
  Engine(std::shared_ptr<torch::nn::Module> model, std::vector<UnitDecl> units, const EngineConfig& engine,
         const OptimConfig& optim, const SchedulerConfig& schedule, std::shared_ptr<Communicator> comm);
  ~Engine() override;
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Backward of one micro-batch's loss (mean over the rank's micro-batch): applies the loss scale and
  // 1/accumulation_steps, launches gradient reductions as buckets complete.
  void backward(const torch::Tensor& loss);
  // One optimizer step after accumulation_steps backward() calls. Never waits for the device.
  void step();
  // The last step's numbers. On GPU this waits for the device: call it on logging steps only.
  StepStats read_stats();

  // Keeps an fp32 EMA of the master weights, sharded like the master and updated after every applied
  // optimizer pass on the device ([ema]). Call before training (a copy of the current weights).
  void enable_ema(const EmaConfig& config);
  ShardedEma* ema() { return ema_.get(); }  // null without [ema]

  // ---- whole steps as CUDA graphs (engine/step_graphs.h) ----
  // Why this engine's steps cannot be captured ("" when they can): the CPU, a host optimizer, a checkpointed
  // unit seen drawing random numbers (its recompute restores the generators' state on the host).
  std::string capture_blocker() const;
  // Brackets the capture of one whole step (every backward() and the step()): the host's per-step
  // bookkeeping (outcome copies, the step counter) stays out of the graph, and every collective stream
  // the step forks is joined before the graph ends.
  void begin_step_capture();
  void end_step_capture();
  // After each replay of a captured step: what step() does on the host.
  void finish_replayed_step();
  bool is_capturing() const { return is_capturing_; }
  // Re-creates the parameters' gradient accumulators (and the GradReducer's hooks on them) on the current
  // stream: autograd orders an accumulator after the stream it was made on, and a step running on
  // another stream (StepGraphs') would otherwise synchronize with that one — which a capture refuses.
  void rebind_grad_hooks();

  // ---- placement ----
  torch::Device device() const { return device_; }
  // Makes every parameter readable (all gathers done; stage 3 gathers everything) — before using the
  // model outside training, e.g. for sampling.
  void gather_all_params();

  // ---- state (checkpoints): StatefulEngine, engine/engine_state.h ----
  EngineState state() override;
  void load_state(const EngineState& loaded) override;
  Communicator& comm() const override { return *comm_; }

  // ---- introspection (tests, tools) ----
  const EngineConfig& config() const { return config_; }
  const ShardingPolicy& policy() const { return policy_; }
  const std::vector<Unit>& units() const { return units_; }
  const std::vector<Bucket>& buckets() const { return buckets_; }
  torch::Tensor master_shard() const { return buffers_->master(); }  // [Σ shard] fp32 (host memory if offloaded)
  Optimizer& optimizer() { return *optimizer_; }
  LossScaler& loss_scaler() { return loss_scaler_; }
  int64_t step_count() const { return step_count_; }
  int64_t skipped_total() const;                // reads the device
  const SchedulerConfig& schedule_config() const { return schedule_; }
  double current_lr() const;                    // of the next update (reads the device)
  // Bytes of model state this rank holds (actual buffers) and the formula figure for this setup.
  ModelStateBytes model_state_bytes() const;
  int64_t num_parameters() const;  // P (unique trainable elements, no padding)
  // Stages 2–3: the most bytes of transient gradient buckets alive at once so far.
  int64_t peak_transient_grad_bytes() const { return transient_grads_.peak; }
  // Stage 3: the most buckets gathered at once so far (the prefetch bound).
  int peak_gathered_buckets() const { return residency_->peak_gathered_buckets(); }

 private:
  void build(torch::nn::Module& model, const std::vector<UnitDecl>& decls);
  void place_units(torch::nn::Module& model, const std::vector<UnitDecl>& decls);
  void load_initial_values();
  std::vector<BucketRange> plan_bucket_ranges() const;
  PreflightInputs preflight_inputs(const std::vector<BucketRange>& plan) const;
  void make_buckets(const std::vector<BucketRange>& plan);
  void move_rest_of_model(torch::nn::Module& model);
  void build_optimizer();
  void install_runners(UnitModule& model);
  void check_model_in_place() const;
  bool is_boundary_micro_step() const;
  // state() without the counters (nothing read from the device): what load_state checks against.
  EngineState layout_state();
  void set_skipped_total(int64_t count);
  // step()'s update: the norm, the decision and the optimizer over every bucket at once; or, with
  // [engine] optimizer_in_backward, what is left once backward updated the buckets one by one.
  void update_all_buckets();
  void finish_bucket_updates();
  // Recomputes the compute-dtype parameters from the master shard (after load_state).
  void refresh_params_from_master();

  // UnitEvents: the model's progress through a step, as the hooks see it.
  void before_unit_forward(size_t u) override { residency_->before_forward(u); }
  void after_unit_forward(size_t u) override { residency_->after_forward(u); }
  void unit_marked_for_backward(size_t u) override { reducer_->marker_attached(u); }
  void before_unit_backward(size_t u) override {
    residency_->before_backward(u);
    reducer_->unit_backward_starting(u);
  }
  void after_unit_backward(size_t u) override { reducer_->unit_backward_done(u); }

  const EngineConfig config_;
  const OptimConfig optim_config_;
  const SchedulerConfig schedule_;
  const ShardingPolicy policy_;
  torch::Device device_;
  std::shared_ptr<Communicator> comm_;  // moves data on device_ (NCCL on CUDA); CPU tensors go to MPI/Gloo
  std::shared_ptr<torch::nn::Module> model_;
  FlatDtypes dtypes_;

  std::vector<Unit> units_;
  std::vector<Bucket> buckets_;
  std::vector<size_t> bucket_of_unit_;
  TransientBytes transient_grads_;
  std::unique_ptr<FlatBuffers> buffers_;
  std::unique_ptr<GradReducer> reducer_;
  std::unique_ptr<ParamResidency> residency_;

  StepRules rules_;
  torch::Tensor scalars_;     // float64 [kStepScalarCount] on device_ (engine/step_scalars.h)
  std::vector<torch::Tensor> norm_pieces_;  // each parameter's part of this rank's gradient slice
  torch::Tensor param_sumsq_;  // float64 [parameters] on device_
  LossScaler loss_scaler_;
  std::unique_ptr<StepOutcome> outcome_;
  std::unique_ptr<Optimizer> optimizer_;
  OffloadedOptimizer* offload_ = nullptr;  // optimizer_ itself when [engine.offload] optimizer = "cpu"
  std::unique_ptr<ShardedEma> ema_;
  std::unique_ptr<UpdateInBackward> update_in_backward_;  // [engine] optimizer_in_backward, else null
  bool is_updating_in_backward_ = false;  // inside the backward that ends a step, with update_in_backward_

  std::shared_ptr<UnitEventsLink> events_link_;
  std::shared_ptr<CheckpointRunner> checkpoint_runner_;  // null without activation checkpointing
  bool has_unit_runner_ = false;

  bool is_capturing_ = false;  // between begin_step_capture and end_step_capture
  int64_t micro_step_ = 0;  // backward() calls since the last step()
  int64_t step_count_ = 0;  // step() calls
};

}  // namespace zest
