// Engine: construction (units, flat buffers, master shard), the backward hooks that launch per-unit
// gradient reductions, and the optimizer step (norm, skip/clip, update, parameter allgather).
#include "engine/engine.h"

#include "engine/activation_checkpoint.h"
#include "core/check.h"
#include "engine/unit_partition.h"
#include "optim/lr_schedule.h"

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <cmath>
#include <iostream>

namespace zest {

// Shared with the autograd hooks so a hook outliving the engine does nothing.
struct Engine::HookTarget {
  Engine* engine = nullptr;
  void ready(size_t unit_idx) {
    if (engine != nullptr) engine->on_param_grad_ready(unit_idx);
  }
};

namespace {

// Runs after a parameter's AccumulateGrad node, i.e. once its gradient for this backward is complete.
class GradReadyHook final : public torch::autograd::FunctionPostHook {
 public:
  GradReadyHook(std::function<void()> on_ready) : on_ready_(std::move(on_ready)) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list& /*inputs*/) override {
    on_ready_();
    return outputs;
  }

 private:
  std::function<void()> on_ready_;
};

// Decay ranges of a unit's owned span, relative to the span start.
std::vector<ElementRange> owned_decay_ranges(const UnitLayout& layout, ElementSpan owned) {
  std::vector<ElementRange> ranges;
  for (const auto& slot : layout.slots) {
    if (!slot.decay) continue;
    const int64_t begin = std::max(slot.offset, owned.begin);
    const int64_t end = std::min(slot.offset + slot.numel, owned.end());
    if (begin >= end) continue;
    if (!ranges.empty() && ranges.back().end == begin - owned.begin) {
      ranges.back().end = end - owned.begin;
    } else {
      ranges.push_back({begin - owned.begin, end - owned.begin});
    }
  }
  return ranges;
}

}  // namespace

Engine::Engine(std::shared_ptr<UnitModule> model, const EngineConfig& engine, const OptimConfig& optim,
               const SchedulerConfig& schedule, std::shared_ptr<Communicator> comm)
    : Engine(model, model->unit_decls(), engine, optim, schedule, std::move(comm)) {
  // Activation checkpointing wraps the model's units per engine.activation_checkpointing.
  model->set_unit_runner(make_checkpoint_runner(engine, *model, model->unit_runner()));
}

Engine::Engine(std::shared_ptr<torch::nn::Module> model, std::vector<UnitDecl> units,
               const EngineConfig& engine, const OptimConfig& optim, const SchedulerConfig& schedule,
               std::shared_ptr<Communicator> comm)
    : config_(engine),
      optim_config_(optim),
      schedule_(schedule),
      policy_(ShardingPolicy::for_stage(engine.stage)),
      comm_(std::move(comm)),
      model_(std::move(model)),
      compute_dtype_(to_dtype(engine.precision)),
      reduce_dtype_(to_dtype(engine.reduce_dtype)),
      scaler_(engine.loss_scale, engine.precision == Precision::fp16) {
  ZEST_CHECK(comm_ != nullptr, "Engine needs a communicator");
  ZEST_CHECK(config_.accumulation_steps >= 1, "engine.accumulation_steps must be >= 1, got ",
             config_.accumulation_steps);
  if (config_.threads > 0) at::set_num_threads(config_.threads);
  build(*model_, units);
  register_grad_hooks();
}

Engine::~Engine() {
  if (hook_target_) hook_target_->engine = nullptr;
  try {
    wait_pending();
  } catch (...) {  // never throw from a destructor; a failed collective was already reported
  }
}

void Engine::build(torch::nn::Module& model, const std::vector<UnitDecl>& decls) {
  torch::NoGradGuard no_grad;
  // Frozen parameters are not sharded, only cast to the compute dtype.
  for (auto& p : model.parameters()) {
    if (!p.requires_grad() && p.is_floating_point()) p.set_data(p.to(compute_dtype_));
  }
  auto parts = partition_into_units(model, decls, optim_config_.no_decay);
  units_.reserve(parts.size());
  int64_t master_numel = 0;
  for (auto& part : parts) {
    auto layout = make_unit_layout(part.name, std::move(part.slots), comm_->size());
    const ElementSpan owned = policy_.shard_optimizer ? layout.shard_span(comm_->rank())
                                                      : ElementSpan{0, layout.padded_numel};
    decay_ranges_.push_back(owned_decay_ranges(layout, owned));
    units_.emplace_back(std::move(layout), std::move(part.tensors), owned, policy_, compute_dtype_);
    master_spans_.push_back({master_numel, owned.numel});
    master_numel += owned.numel;
  }
  master_ = torch::zeros({master_numel}, torch::kFloat32);
  for (size_t u = 0; u < units_.size(); ++u) {
    // Rank 0's initial values win, so every rank starts from identical parameters.
    auto initial = units_[u].take_initial_values();
    comm_->broadcast_sync(initial, 0);
    units_[u].set_values(initial);
    const ElementSpan owned = units_[u].owned();
    master_.narrow(0, master_spans_[u].begin, owned.numel).copy_(initial.narrow(0, owned.begin, owned.numel));
  }
  if (policy_.shard_grads) grad_shard_ = torch::zeros({master_numel}, reduce_dtype_);
  std::vector<int64_t> unit_bytes;
  for (const auto& unit : units_) unit_bytes.push_back(unit.param_flat().nbytes());
  buckets_ = plan_buckets(unit_bytes, static_cast<int64_t>(config_.bucket_mb * 1024 * 1024));
  optimizer_ = make_optimizer(optim_config_, master_numel);
  grads_ready_.assign(units_.size(), 0);
  unit_reduced_.assign(units_.size(), 0);
}

void Engine::register_grad_hooks() {
  hook_target_ = std::make_shared<HookTarget>();
  hook_target_->engine = this;
  for (size_t u = 0; u < units_.size(); ++u) {
    for (const auto& param : units_[u].params()) {
      auto accumulator = torch::autograd::impl::grad_accumulator(param);
      ZEST_CHECK(accumulator != nullptr, "parameter of unit ", units_[u].name(), " has no grad accumulator");
      std::weak_ptr<HookTarget> target = hook_target_;
      accumulator->add_post_hook(std::make_unique<GradReadyHook>([target, u] {
        if (auto t = target.lock()) t->ready(u);
      }));
      grad_accumulators_.push_back(std::move(accumulator));
    }
  }
}

bool Engine::is_boundary_micro_step() const {
  return (micro_step_ + 1) % config_.accumulation_steps == 0;
}

void Engine::backward(const torch::Tensor& loss) {
  ZEST_CHECK(loss.numel() == 1, "backward() needs a scalar loss, got shape ", loss.sizes());
  ZEST_CHECK(micro_step_ < config_.accumulation_steps, "backward() called ", micro_step_ + 1,
             " times without step(); engine.accumulation_steps = ", config_.accumulation_steps);
  // Stages 0/1 accumulate locally and communicate on the boundary micro-step only; stage 2 keeps just
  // its slice, so it reduce-scatters every micro-step and accumulates into the fp32/bf16 shard.
  reduce_this_micro_step_ = policy_.shard_grads || is_boundary_micro_step();
  std::fill(grads_ready_.begin(), grads_ready_.end(), 0);
  std::fill(unit_reduced_.begin(), unit_reduced_.end(), 0);
  next_bucket_ = static_cast<int>(buckets_.size()) - 1;

  const double factor = scaler_.scale() / config_.accumulation_steps;
  (loss.to(torch::kFloat32) * factor).backward();

  if (reduce_this_micro_step_) launch_ready_reductions(/*flush=*/true);
  if (policy_.shard_grads) wait_pending();  // frees the unit buckets before the next forward
  ++micro_step_;
}

void Engine::on_param_grad_ready(size_t unit_idx) {
  if (!reduce_this_micro_step_) return;
  ++grads_ready_[unit_idx];
  if (is_unit_complete(unit_idx)) launch_ready_reductions(/*flush=*/false);
}

bool Engine::is_unit_complete(size_t u) const {
  return grads_ready_[u] == static_cast<int>(units_[u].params().size());
}

// Buckets go out strictly from the last to the first, on every rank, so collectives match across ranks
// even when units finish in a different order; a bucket waits for all of its units (flush: end of
// backward, where units whose parameters got no gradient are reduced as they are).
void Engine::launch_ready_reductions(bool flush) {
  while (next_bucket_ >= 0) {
    const Bucket& bucket = buckets_[static_cast<size_t>(next_bucket_)];
    if (!flush) {
      for (size_t u = bucket.first; u <= bucket.last; ++u) {
        if (!is_unit_complete(u)) return;
      }
    }
    reduce_bucket(bucket);
    --next_bucket_;
  }
}

void Engine::reduce_bucket(const Bucket& bucket) {
  if (bucket.first == bucket.last) {
    reduce_unit(bucket.first);
    return;
  }
  const int world = comm_->size();
  std::vector<torch::Tensor> grads;
  for (size_t u = bucket.first; u <= bucket.last; ++u) {
    ZEST_CHECK(!unit_reduced_[u], "unit ", units_[u].name(), " reduced twice in one micro-step");
    unit_reduced_[u] = 1;
    grads.push_back(policy_.shard_grads ? units_[u].take_grads_into_bucket() : units_[u].grad_flat());
  }
  // Fused: world rows of [slice of each unit], so rank r's result row holds each unit's slice r.
  auto packed = pack_rank_major(grads, world);
  if (!policy_.shard_optimizer) {  // stage 0: allreduce the fused buffer, then copy back
    pending_.push_back({comm_->allreduce(packed, ReduceOp::sum),
                        [packed, grads, world] { unpack_rank_major(packed, grads, world); }});
    return;
  }
  const torch::Dtype out_dtype = policy_.shard_grads ? reduce_dtype_ : compute_dtype_;
  auto reduced = torch::empty({packed.numel() / world}, packed.options().dtype(out_dtype));
  auto work = comm_->reduce_scatter(packed, reduced, ReduceOp::sum);
  if (policy_.shard_grads) {
    // The bucket's units have consecutive spans in the gradient shard, in the same order as a row.
    const int64_t begin = master_spans_[bucket.first].begin;
    pending_.push_back({std::move(work), [this, begin, reduced] {
                          grad_shard_.narrow(0, begin, reduced.numel()).add_(reduced);
                        }});
    return;
  }
  std::vector<torch::Tensor> owned;  // stage 1: each unit's own slice of its full gradient buffer
  for (size_t u = bucket.first; u <= bucket.last; ++u) {
    owned.push_back(units_[u].grad_flat().narrow(0, units_[u].owned().begin, units_[u].owned().numel));
  }
  pending_.push_back({std::move(work), [reduced, owned] {
                        int64_t offset = 0;
                        for (const auto& slice : owned) {
                          slice.copy_(reduced.narrow(0, offset, slice.numel()));
                          offset += slice.numel();
                        }
                      }});
}

void Engine::reduce_unit(size_t u) {
  ZEST_CHECK(!unit_reduced_[u], "unit ", units_[u].name(), " reduced twice in one micro-step");
  unit_reduced_[u] = 1;
  FlatUnit& unit = units_[u];
  if (!policy_.shard_optimizer) {  // stage 0: full gradient everywhere
    pending_.push_back({comm_->allreduce(unit.grad_flat(), ReduceOp::sum), nullptr});
  } else if (!policy_.shard_grads) {  // stage 1: reduce into the own slice of the full buffer
    const ElementSpan own = unit.owned();
    pending_.push_back(
        {comm_->reduce_scatter(unit.grad_flat(), unit.grad_flat().narrow(0, own.begin, own.numel), ReduceOp::sum),
         nullptr});
  } else {  // stage 2: bucket → reduce-scatter → accumulate into the persistent shard
    auto bucket = unit.take_grads_into_bucket();
    auto reduced = torch::empty({unit.owned().numel}, bucket.options().dtype(reduce_dtype_));
    const ElementSpan span = master_spans_[u];
    auto work = comm_->reduce_scatter(bucket, reduced, ReduceOp::sum);
    pending_.push_back({std::move(work), [this, span, reduced] {
                          grad_shard_.narrow(0, span.begin, span.numel).add_(reduced);
                        }});
  }
}

void Engine::wait_pending() {
  torch::NoGradGuard no_grad;
  for (auto& p : pending_) {
    p.work->wait();
    if (p.then) p.then();
  }
  pending_.clear();
}

torch::Tensor Engine::owned_grad(size_t u) const {
  if (policy_.shard_grads) return grad_shard_.narrow(0, master_spans_[u].begin, master_spans_[u].numel);
  const ElementSpan own = units_[u].owned();
  return units_[u].grad_flat().narrow(0, own.begin, own.numel);
}

double Engine::current_lr() const { return learning_rate(schedule_, optim_config_.lr, step_count_); }

StepStats Engine::step() {
  ZEST_CHECK(micro_step_ == config_.accumulation_steps, "step() after ", micro_step_,
             " backward() call(s); engine.accumulation_steps = ", config_.accumulation_steps);
  micro_step_ = 0;
  wait_pending();
  torch::NoGradGuard no_grad;

  // Global gradient norm: each rank squares its slice, one allreduce (stage 0 holds it all already).
  // A non-finite value anywhere makes the sum non-finite, so the same number flags overflow.
  auto sumsq = torch::zeros({1}, torch::kFloat64);
  for (size_t u = 0; u < units_.size(); ++u) sumsq += owned_grad(u).to(torch::kFloat32).pow(2).sum(torch::kFloat64);
  if (policy_.shard_optimizer) comm_->allreduce_sync(sumsq, ReduceOp::sum);
  const double raw_sumsq = sumsq.item<double>();

  StepStats stats;
  stats.loss_scale = scaler_.scale();
  const double unscale = 1.0 / (scaler_.scale() * comm_->size());
  stats.grad_norm = std::sqrt(raw_sumsq) * unscale;

  if (!std::isfinite(raw_sumsq)) {
    const std::string culprit = first_nonfinite_param();
    zero_grads();
    ++skipped_total_;
    ++consecutive_nonfinite_;
    if (scaler_.enabled()) {
      const bool at_floor = scaler_.update(/*overflow=*/true);
      if (at_floor && config_.loss_scale.at_min == AtMinScale::error) {
        ZEST_FAIL("fp16 loss scale is at its minimum (", config_.loss_scale.min,
                  ") and gradients still overflow at step ", step_count_, " (first non-finite gradient: ",
                  culprit, "); set engine.loss_scale.at_min = \"warn\" to keep skipping");
      }
      if (at_floor && comm_->rank() == 0) {
        std::cerr << "zest: warning: fp16 loss scale at its minimum and gradients overflow (" << culprit << ")\n";
      }
    } else {
      ZEST_CHECK(consecutive_nonfinite_ < config_.max_nonfinite_steps, consecutive_nonfinite_,
                 " consecutive steps had non-finite gradients (first non-finite gradient: ", culprit,
                 ") — stopping (engine.max_nonfinite_steps = ", config_.max_nonfinite_steps, ")");
      if (comm_->rank() == 0) {
        std::cerr << "zest: warning: step " << step_count_ << " skipped: non-finite gradient in " << culprit << "\n";
      }
    }
    stats.skipped = true;
    stats.step = step_count_;
    stats.skipped_total = skipped_total_;
    return stats;
  }

  double clip_coef = 1.0;
  if (config_.clip_norm > 0.0) clip_coef = std::min(1.0, config_.clip_norm / (stats.grad_norm + 1e-6));
  stats.lr = current_lr();
  std::vector<OptimSegment> segments;
  segments.reserve(units_.size());
  for (size_t u = 0; u < units_.size(); ++u) {
    const ElementSpan span = master_spans_[u];
    segments.push_back({span.begin, master_.narrow(0, span.begin, span.numel), owned_grad(u), decay_ranges_[u]});
  }
  optimizer_->step(segments, {stats.lr, unscale * clip_coef});
  refresh_params_from_master();
  zero_grads();
  scaler_.update(/*overflow=*/false);
  consecutive_nonfinite_ = 0;
  ++step_count_;
  stats.step = step_count_;
  stats.skipped_total = skipped_total_;
  return stats;
}

void Engine::refresh_params_from_master() {
  torch::NoGradGuard no_grad;
  for (size_t u = 0; u < units_.size(); ++u) {
    units_[u].param_owned().copy_(master_.narrow(0, master_spans_[u].begin, master_spans_[u].numel));
  }
  if (!policy_.shard_optimizer) return;
  const int world = comm_->size();
  for (const Bucket& bucket : buckets_) {
    if (bucket.first == bucket.last) {  // in place: the own slice already sits in the full buffer
      const FlatUnit& unit = units_[bucket.first];
      pending_.push_back({comm_->allgather(unit.param_owned(), unit.param_flat()), nullptr});
      continue;
    }
    std::vector<torch::Tensor> params;
    int64_t row = 0;
    for (size_t u = bucket.first; u <= bucket.last; ++u) {
      params.push_back(units_[u].param_flat());
      row += units_[u].owned().numel;
    }
    auto packed = torch::empty({world, row}, params.front().options());
    const int64_t begin = master_spans_[bucket.first].begin;
    packed[comm_->rank()].copy_(master_.narrow(0, begin, row));
    pending_.push_back({comm_->allgather(packed[comm_->rank()], packed.view({-1})),
                        [packed, params, world] { unpack_rank_major(packed.view({-1}), params, world); }});
  }
  wait_pending();
}

void Engine::zero_grads() {
  for (auto& unit : units_) unit.zero_grads();
  if (grad_shard_.defined()) grad_shard_.zero_();
}

std::string Engine::first_nonfinite_param() {
  // Each rank finds its first non-finite slot (global ordinal); the smallest across ranks wins.
  int64_t ordinal = 0;
  double local_best = -1e300;
  for (size_t u = 0; u < units_.size() && local_best == -1e300; ++u) {
    const auto grad = owned_grad(u);
    const ElementSpan own = units_[u].owned();
    for (const auto& slot : units_[u].layout().slots) {
      const int64_t begin = std::max(slot.offset, own.begin), end = std::min(slot.offset + slot.numel, own.end());
      if (begin < end && !torch::isfinite(grad.narrow(0, begin - own.begin, end - begin)).all().item<bool>()) {
        local_best = -static_cast<double>(ordinal);
        break;
      }
      ++ordinal;
    }
  }
  auto best = torch::tensor({local_best}, torch::kFloat64);
  comm_->allreduce_sync(best, ReduceOp::max);
  const double found = best.item<double>();
  if (found == -1e300) return "(none found: the norm itself overflowed)";
  int64_t target = static_cast<int64_t>(-found);
  for (const auto& unit : units_) {
    for (const auto& slot : unit.layout().slots) {
      if (target-- == 0) return slot.name + " (unit " + unit.name() + ")";
    }
  }
  return "(unknown)";
}

ModelStateBytes Engine::model_state_bytes() const {
  ModelStateBytes bytes;
  for (const auto& unit : units_) {
    bytes.params += unit.param_flat().nbytes();
    if (unit.has_grad_flat()) bytes.grads += unit.grad_flat().nbytes();
  }
  if (grad_shard_.defined()) bytes.grads += grad_shard_.nbytes();
  bytes.master = master_.nbytes();
  for (const auto& [name, tensor] : optimizer_->state_tensors()) bytes.optimizer += tensor.nbytes();
  return bytes;
}

int64_t Engine::num_parameters() const {
  int64_t n = 0;
  for (const auto& unit : units_) n += unit.layout().numel;
  return n;
}

}  // namespace zest
