// Engine: assembly (placement, units, flat buffers, buckets, optimizer, hooks) and the step, which reads
// top to bottom: backward() launches bucket reductions as units finish; step() orders them, takes the
// per-parameter norms (one allreduce), decides skip/clip/scale on the device, updates the shard and starts
// the parameter gathers the next forward waits for unit by unit. The gradient walk's last stop
// (docs/design.md): step() hands the reduced gradient shard to the optimizer.
#include "engine/engine.h"

#include "comm/collective_timeout.h"
#include "comm/device_communicator.h"
#include "core/check.h"
#include "core/compat.h"
#include "engine/activation_checkpoint.h"
#include "engine/bucket_plan.h"
#include "engine/device_placement.h"
#include "engine/preflight.h"
#include "engine/step_decision.h"
#include "engine/sums_of_squares.h"
#include "engine/unit_partition.h"

#include <ATen/Context.h>

#include <algorithm>
#include <map>

namespace zest {
namespace {

// The spans of a unit's owned part that get weight decay, relative to the part's start.
std::vector<ElementSpan> owned_decay_spans(const UnitLayout& layout, ElementSpan owned) {
  std::vector<ElementSpan> spans;
  for (const auto& slot : layout.slots) {
    if (!slot.decay) continue;
    const int64_t begin = std::max(slot.offset, owned.begin);
    const int64_t end = std::min(slot.offset + slot.numel, owned.end());
    if (begin >= end) continue;
    if (!spans.empty() && spans.back().end() == begin - owned.begin) {
      spans.back().numel += end - begin;
    } else {
      spans.push_back({begin - owned.begin, end - begin});
    }
  }
  return spans;
}

StepRules step_rules(const EngineConfig& engine, const OptimConfig& optim, const SchedulerConfig& schedule,
                     int world_size) {
  StepRules r;
  r.clip_norm = engine.clip_norm;
  r.world_size = world_size;
  r.loss_scaling = engine.precision == Precision::fp16 ? 1.0 : 0.0;
  r.scale_min = engine.loss_scale.min;
  r.scale_window = engine.loss_scale.window;
  r.scale_hysteresis = engine.loss_scale.hysteresis;
  r.stop_at_min_scale = engine.loss_scale.at_min == AtMinScale::error ? 1.0 : 0.0;
  r.max_nonfinite_steps = engine.max_nonfinite_steps;
  r.schedule_kind = schedule.name == ScheduleKind::constant ? 0.0 : schedule.name == ScheduleKind::cosine ? 1.0 : 2.0;
  r.base_lr = optim.lr;
  r.warmup_steps = schedule.warmup_steps;
  r.decay_steps = schedule.decay_steps;
  r.min_lr = schedule.min_lr;
  r.beta1 = optim.beta1;
  r.beta2 = optim.beta2;
  return r;
}

torch::Tensor initial_scalars(const EngineConfig& engine, const torch::Device& device) {
  StepScalars s;
  if (engine.precision == Precision::fp16) s.loss_scale = engine.loss_scale.initial;
  s.hysteresis_left = std::max(1, engine.loss_scale.hysteresis);
  auto host = torch::empty({kStepScalarCount}, torch::kFloat64);
  *reinterpret_cast<StepScalars*>(host.data_ptr<double>()) = s;
  return host.to(device);
}

// The unit whose prefixes claim `name` (the first in declaration order), or -1.
int unit_claiming(const std::vector<UnitDecl>& decls, const std::string& name) {
  for (size_t u = 0; u < decls.size(); ++u) {
    for (const auto& prefix : decls[u].prefixes) {
      const bool is_module = !prefix.empty() && prefix.back() == '.';
      if (is_module ? name.rfind(prefix, 0) == 0 : name == prefix) return static_cast<int>(u);
    }
  }
  return -1;
}

}  // namespace

Engine::Engine(std::shared_ptr<UnitModule> model, const EngineConfig& engine, const OptimConfig& optim,
               const SchedulerConfig& schedule, std::shared_ptr<Communicator> comm)
    : Engine(model, model->unit_decls(), engine, optim, schedule, std::move(comm)) {
  install_runners(*model);
}

Engine::Engine(std::shared_ptr<torch::nn::Module> model, std::vector<UnitDecl> units, const EngineConfig& engine,
               const OptimConfig& optim, const SchedulerConfig& schedule, std::shared_ptr<Communicator> comm)
    : config_(engine),
      optim_config_(optim),
      schedule_(schedule),
      policy_(ShardingPolicy::for_stage(engine.stage, comm ? comm->size() : 1, engine.reshard_after_forward)),
      device_(torch::kCPU),
      model_(std::move(model)),
      loss_scaler_(torch::Tensor(), false) {
  ZEST_CHECK(comm != nullptr, "Engine needs a communicator");
  ZEST_CHECK(config_.accumulation_steps >= 1, "engine.accumulation_steps must be >= 1, got ",
             config_.accumulation_steps);
  device_ = place_engine(config_, *comm);
  comm_ = communicator_for_device(comm, device_);
  set_collective_timeout(config_.collective_timeout_s);
  if (config_.threads > 0) at::set_num_threads(config_.threads);
  // Process-wide, as torch.backends.cudnn.benchmark is: set by the engine that drives the GPU.
  if (device_.is_cuda()) at::globalContext().setBenchmarkCuDNN(config_.cudnn_benchmark);
  dtypes_ = {to_dtype(config_.precision), to_dtype(config_.reduce_dtype)};
  build(*model_, units_with_trainable_params(*model_, units));
}

Engine::~Engine() {
  if (events_link_) events_link_->events = nullptr;
  try {
    if (reducer_) reducer_->wait_all();
    for (Bucket& bucket : buckets_) bucket.wait_unshard();
  } catch (...) {  // never throw from a destructor; a failed collective was already reported
  }
}

// ---- assembly ---------------------------------------------------------------------------------------

namespace {

// Bytes of the model's parameters and buffers in host memory.
int64_t host_bytes_of(torch::nn::Module& model) {
  int64_t bytes = 0;
  for (const auto& p : model.parameters()) bytes += p.device().is_cpu() ? static_cast<int64_t>(p.nbytes()) : 0;
  for (const auto& b : model.buffers()) bytes += b.device().is_cpu() ? static_cast<int64_t>(b.nbytes()) : 0;
  return bytes;
}

}  // namespace

void Engine::build(torch::nn::Module& model, const std::vector<UnitDecl>& decls) {
  place_units(model, decls);
  const std::vector<BucketRange> plan = plan_bucket_ranges();
  // Before the first byte of model state; the model's own host copy leaves as it moves to the GPU.
  check_fits(preflight_inputs(plan), device_, comm_->local_size(), host_bytes_of(model));
  const bool offload = config_.offload_optimizer != OffloadTarget::none;
  ZEST_CHECK(!offload || policy_.can_offload_optimizer(), "optimizer offload needs engine.stage = 1, 2 or 3");
  buffers_ = std::make_unique<FlatBuffers>(units_, policy_, dtypes_, device_, /*master_on_host=*/offload);
  load_initial_values();
  make_buckets(plan);
  move_rest_of_model(model);

  rules_ = step_rules(config_, optim_config_, schedule_, comm_->size());
  scalars_ = initial_scalars(config_, device_);
  std::vector<std::string> param_names;
  std::vector<size_t> pieces_of_unit;  // each unit's first norm piece, then the count
  for (size_t u = 0; u < units_.size(); ++u) {
    pieces_of_unit.push_back(norm_pieces_.size());
    const Unit& unit = units_[u];
    const ElementSpan owned = unit.owned();
    for (const auto& slot : unit.layout().slots) {
      // The slot's part of this rank's owned part (empty when it lies in another rank's slice).
      const int64_t begin = std::clamp(slot.offset, owned.begin, owned.end());
      const int64_t end = std::clamp(slot.offset + slot.numel, owned.begin, owned.end());
      norm_pieces_.push_back(buffers_->grad_shard(u).narrow(0, begin - owned.begin, end - begin));
      param_names.push_back(slot.name + " (unit " + unit.name() + ")");
    }
  }
  pieces_of_unit.push_back(norm_pieces_.size());
  param_sumsq_ = torch::zeros({static_cast<int64_t>(norm_pieces_.size())},
                              torch::TensorOptions().dtype(torch::kFloat64).device(device_));
  loss_scaler_ = LossScaler(scalars_, config_.precision == Precision::fp16);
  outcome_ = std::make_unique<StepOutcome>(scalars_, std::move(param_names), config_, comm_->rank());
  build_optimizer();

  // Waiting for the reduction launched two buckets earlier bounds the transient gradient buffers to
  // three; on CUDA the wait is a stream wait placed after the next buckets' backward, so it rarely holds.
  const int max_in_flight = 2;
  // Under reentrant checkpointing a parameter may be accumulated more than once per backward, so a unit
  // without a backward signal is complete only at the end of backward.
  const bool is_accumulation_final = config_.activation_checkpointing == CheckpointPolicy::none;
  reducer_ = std::make_unique<GradReducer>(units_, buckets_, bucket_of_unit_, max_in_flight, is_accumulation_final);
  std::vector<std::vector<size_t>> needed(units_.size());
  for (size_t u = 0; u < units_.size(); ++u) needed[u].push_back(bucket_of_unit_[u]);
  for (size_t owner = 0; owner < units_.size(); ++owner) {
    for (size_t user : units_[owner].tied_users()) {
      auto& list = needed[user];
      if (std::find(list.begin(), list.end(), bucket_of_unit_[owner]) == list.end()) {
        list.push_back(bucket_of_unit_[owner]);
      }
    }
  }
  residency_ = std::make_unique<ParamResidency>(buckets_, std::move(needed), policy_, config_.prefetch,
                                                /*is_lazy=*/device_.is_cuda());
  if (config_.optimizer_in_backward) {
    ZEST_CHECK(config_.clip_norm == 0.0 && config_.precision != Precision::fp16 && !offload,
               "engine.optimizer_in_backward needs clip_norm = 0, no fp16 and no optimizer offload");
    update_in_backward_ = std::make_unique<UpdateInBackward>(buckets_, *reducer_, *optimizer_, rules_, scalars_,
                                                             norm_pieces_, std::move(pieces_of_unit), param_sumsq_);
  }
  reducer_->on_launched = [this](size_t b) {
    residency_->bucket_reduced(b);
    if (is_updating_in_backward_) update_in_backward_->bucket_reduced(b);
  };

  events_link_ = std::make_shared<UnitEventsLink>();
  events_link_->events = this;
  reducer_->hook_params();  // the gradient walk starts here (docs/design.md)
}

// Units from the declarations: layouts for this world size, this rank's owned parts, tied-parameter users.
void Engine::place_units(torch::nn::Module& model, const std::vector<UnitDecl>& decls) {
  torch::NoGradGuard no_grad;
  auto parts = partition_into_units(model, decls, optim_config_.no_decay);
  const int world = comm_->size();
  int64_t flat_begin = 0;
  units_.reserve(parts.size());
  for (auto& part : parts) {
    auto layout = make_unit_layout(part.name, std::move(part.slots), world);
    const ElementSpan owned = policy_.owned(layout, comm_->rank());
    units_.emplace_back(std::move(layout), std::move(part.tensors), owned, flat_begin);
    flat_begin += owned.numel;
  }
  for (size_t u = 0; u < units_.size(); ++u) {
    for (const auto& slot : units_[u].layout().slots) {
      for (const auto& alias : slot.aliases) {
        const int user = unit_claiming(decls, alias);
        if (user >= 0 && static_cast<size_t>(user) != u) units_[u].add_tied_user(static_cast<size_t>(user));
      }
    }
  }
}

// Rank 0's values win, so every rank starts from identical parameters; each lands in the master shard
// and the parameters the rank keeps, on the device (the buckets then point the units at them).
void Engine::load_initial_values() {
  torch::NoGradGuard no_grad;
  for (size_t u = 0; u < units_.size(); ++u) {
    auto initial = units_[u].values_fp32_cpu();  // [padded] fp32, read before the views replace the originals
    comm_->broadcast_sync(initial, 0);           // a CPU tensor: a control message
    buffers_->load_unit(u, initial.to(device_));
  }
}

// Neighbouring units share a collective up to engine.bucket_mb of gradients (reduce-dtype bytes).
std::vector<BucketRange> Engine::plan_bucket_ranges() const {
  std::vector<int64_t> unit_bytes;
  const int64_t element_bytes = torch::elementSize(dtypes_.reduce);
  for (const auto& unit : units_) unit_bytes.push_back(unit.padded_numel() * element_bytes);
  return zest::plan_buckets(unit_bytes, static_cast<int64_t>(config_.bucket_mb * 1024 * 1024));
}

PreflightInputs Engine::preflight_inputs(const std::vector<BucketRange>& plan) const {
  PreflightInputs in = preflight_inputs_for(num_parameters(), comm_->size(), config_, optim_config_, /*ema=*/false);
  for (const BucketRange& range : plan) {
    int64_t numel = 0;
    for (size_t u = range.first; u <= range.last; ++u) numel += units_[u].padded_numel();
    in.largest_bucket_numel = std::max(in.largest_bucket_numel, numel);
  }
  return in;
}

void Engine::make_buckets(const std::vector<BucketRange>& plan) {
  const BucketEnv env{comm_.get(), &policy_, &units_, buffers_.get(), &transient_grads_};
  buckets_.reserve(plan.size());
  bucket_of_unit_.assign(units_.size(), 0);
  for (size_t b = 0; b < plan.size(); ++b) {
    buckets_.emplace_back(plan[b].first, plan[b].last, env);
    for (size_t u = plan[b].first; u <= plan[b].last; ++u) bucket_of_unit_[u] = b;
  }
}

// Buffers and frozen parameters are not sharded: they move to the device as they are (frozen floating
// parameters in the compute dtype).
void Engine::move_rest_of_model(torch::nn::Module& model) {
  torch::NoGradGuard no_grad;
  for (auto& param : model.parameters()) {
    if (param.requires_grad()) continue;
    param.set_data(param.is_floating_point() ? param.to(device_, dtypes_.compute) : param.to(device_));
  }
  for (auto& buffer : model.buffers()) buffer.set_data(buffer.to(device_));
}

void Engine::build_optimizer() {
  std::vector<OptimSegment> segments;
  segments.reserve(units_.size());
  for (size_t u = 0; u < units_.size(); ++u) {
    const Unit& unit = units_[u];
    // The gradient walk ends here (docs/design.md): the optimizer reads the unit's part of the gradient shard.
    segments.push_back({.in_flat = unit.in_flat(),
                        .master = buffers_->master(u),
                        .grad = buffers_->grad_shard(u),
                        .param = buffers_->param_shard(u),
                        .decay_spans = owned_decay_spans(unit.layout(), unit.owned())});
  }
  const int64_t numel = buffers_->master().numel();
  // Every view of the per-step gradients is made (the norm pieces before, the segments here): their memory
  // waits for backward, and goes before the optimizer state comes, so building never holds both at once.
  buffers_->reset_grads();
  if (config_.offload_optimizer != OffloadTarget::none) {
    auto offloaded = std::make_unique<OffloadedOptimizer>(optim_config_, std::move(segments), numel, scalars_,
                                                          config_.offload_staging_bytes());
    offload_ = offloaded.get();
    optimizer_ = std::move(offloaded);
    return;
  }
  optimizer_ = make_optimizer(optim_config_, std::move(segments), numel, scalars_);
}

// The model's run_unit calls go through: signals (markers, output hooks) → activation checkpointing →
// forward entry (gathers) → the model's own runner, if it had one.
void Engine::install_runners(UnitModule& model) {
  std::map<std::string, size_t> index;
  for (size_t u = 0; u < units_.size(); ++u) index[units_[u].name()] = u;
  for (const UnitDecl& decl : model.unit_decls()) index.try_emplace(decl.name, kFrozenUnit);  // all frozen
  auto entry = std::make_shared<ForwardEntryRunner>(index, events_link_, model.unit_runner());
  std::shared_ptr<CheckpointRunner> checkpoint = make_checkpoint_runner(config_, model, entry);
  checkpoint_runner_ = checkpoint;
  std::function<bool(const std::string&)> is_checkpointed;
  if (checkpoint) {
    std::weak_ptr<UnitEventsLink> link = events_link_;
    checkpoint->set_after_backward([link, index](const std::string& name) {
      const size_t u = index.at(name);
      if (auto l = link.lock(); l && l->events && u != kFrozenUnit) l->events->after_unit_backward(u);
    });
    is_checkpointed = [checkpoint](const std::string& name) { return checkpoint->is_checkpointed(name); };
  }
  std::shared_ptr<UnitRunner> below = checkpoint ? std::shared_ptr<UnitRunner>(checkpoint) : entry;
  model.set_unit_runner(std::make_shared<BackwardSignalRunner>(index, events_link_, below, is_checkpointed));
  has_unit_runner_ = true;
}

// ---- the step ---------------------------------------------------------------------------------------

bool Engine::is_boundary_micro_step() const { return (micro_step_ + 1) % config_.accumulation_steps == 0; }

void Engine::check_model_in_place() const {
  ZEST_CHECK(!policy_.gathers_per_unit() || has_unit_runner_, "engine.stage = 3 needs a zest::UnitModule whose units "
             "run through run_unit(), so parameters can be gathered per unit");
  for (const Unit& unit : units_) {
    ZEST_CHECK(unit.params_are_engine_views(), "the parameters of unit '", unit.name(), "' no longer live in the "
               "engine's buffers: the model was moved or its parameters replaced after the Engine was built "
               "(build the Engine last; it places the model on ", device_, " itself)");
  }
}

void Engine::backward(const torch::Tensor& loss) {
  ZEST_CHECK(loss.numel() == 1, "backward() needs a scalar loss, got shape ", loss.sizes());
  ZEST_CHECK(micro_step_ < config_.accumulation_steps, "backward() called ", micro_step_ + 1,
             " times without step(); engine.accumulation_steps = ", config_.accumulation_steps);
  if (micro_step_ == 0) check_model_in_place();
  if (!is_capturing_) outcome_->poll();  // host work: never part of a graph
  const bool reduce = policy_.reduces_every_micro_step() || is_boundary_micro_step();
  reducer_->begin_backward(reduce, /*accumulate=*/policy_.reduces_every_micro_step() && micro_step_ > 0);
  residency_->begin_backward();
  // loss · scale / accumulation_steps, the scale read on the device.
  const auto factor = (scalars_.narrow(0, kLossScaleIndex, 1) / config_.accumulation_steps).to(torch::kFloat32);
  is_updating_in_backward_ = update_in_backward_ && is_boundary_micro_step();
  if (is_updating_in_backward_) update_in_backward_->begin_step();
  (loss.to(torch::kFloat32).reshape({1}) * factor.to(loss.device())).sum().backward();
  reducer_->end_backward();
  if (is_updating_in_backward_) update_in_backward_->end_backward();
  is_updating_in_backward_ = false;
  residency_->end_backward();
  ++micro_step_;
}

void Engine::step() {
  ZEST_CHECK(micro_step_ == config_.accumulation_steps, "step() after ", micro_step_,
             " backward() call(s); engine.accumulation_steps = ", config_.accumulation_steps);
  micro_step_ = 0;
  torch::NoGradGuard no_grad;
  reducer_->wait_all();
  if (update_in_backward_) {
    finish_bucket_updates();
  } else {
    update_all_buckets();
  }
  if (ema_) {
    // The EMA sits next to the master: with offload both are in host memory, gated by the host's scalars.
    const torch::Tensor& scalars = offload_ ? offload_->host_scalars() : scalars_;
    ema_->update(buffers_->master(), scalars[kAppliedStepsIndex].to(torch::kLong),
                 scalars[kAppliedIndex].to(torch::kFloat32));
  }
  for (Bucket& bucket : buckets_) bucket.release_grads();
  buffers_->reset_grads();  // the per-step gradients' memory is free for the next forward's activations
  residency_->after_step();                        // stages 1–2: gathers the next forward waits for
  if (is_capturing_) {
    residency_->join_gathers();  // a graph must join what it forks; each replay counts the step itself
    return;
  }
  ++step_count_;
  outcome_->capture(step_count_);
}

void Engine::update_all_buckets() {
  if (offload_) offload_->start_downloads();  // the gradient shard starts for the host while the norm is computed
  // Global norm: each rank's per-parameter sums of squares, one allreduce (stage 0 holds it all already).
  sums_of_squares(norm_pieces_, param_sumsq_);
  if (!policy_.owns_whole_units()) comm_->allreduce(param_sumsq_, ReduceOp::sum)->wait();
  run_step_decision(StepDecision::whole_step, rules_, scalars_, param_sumsq_);  // skip, clip, scale, lr: on the device
  optimizer_->step();  // reads them there; a skipped step changes nothing
}

// Every bucket was updated in backward: the step's norm over ranks and its non-finite bookkeeping remain.
void Engine::finish_bucket_updates() {
  if (!policy_.owns_whole_units()) comm_->allreduce(param_sumsq_, ReduceOp::sum)->wait();
  update_in_backward_->finish_step();
}

// ---- whole steps as CUDA graphs ---------------------------------------------------------------------

std::string Engine::capture_blocker() const {
  if (!device_.is_cuda()) return "the engine runs on " + device_.str();
  if (offload_) return "the optimizer runs on the host ([engine.offload] optimizer = \"cpu\")";
  if (checkpoint_runner_ && !checkpoint_runner_->unit_drawing_random_numbers().empty())
    return "activation checkpointing: unit '" + checkpoint_runner_->unit_drawing_random_numbers() +
           "' draws random numbers (dropout), and its recompute restores the generators' state on the host";
  return "";
}

void Engine::begin_step_capture() {
  ZEST_CHECK(capture_blocker().empty(), "a step cannot be captured: ", capture_blocker());
  ZEST_CHECK(micro_step_ == 0 && !is_capturing_, "begin_step_capture() inside a step");
  outcome_->poll();
  residency_->join_gathers();  // the graph must not wait on work recorded before it began
  if (checkpoint_runner_) checkpoint_runner_->set_capturing(true);
  is_capturing_ = true;
}

void Engine::end_step_capture() {
  ZEST_CHECK(is_capturing_ && micro_step_ == 0, "end_step_capture() without a captured step()");
  if (checkpoint_runner_) checkpoint_runner_->set_capturing(false);
  is_capturing_ = false;
}

void Engine::rebind_grad_hooks() {
  ZEST_CHECK(micro_step_ == 0 && !is_capturing_, "rebind_grad_hooks() inside a step");
  reducer_->hook_params();
}

void Engine::finish_replayed_step() {
  ++step_count_;
  outcome_->capture(step_count_);
}

StepStats Engine::read_stats() {
  const StepScalars s = outcome_->read_now(step_count_);
  StepStats stats;
  stats.step = step_count_;
  stats.applied_steps = static_cast<int64_t>(s.applied_steps);
  stats.lr = s.lr;
  stats.grad_norm = s.grad_norm;
  stats.loss_scale = s.used_loss_scale;
  stats.skipped = s.skip != 0.0;
  stats.skipped_total = static_cast<int64_t>(s.skipped_total);
  return stats;
}

// ---- state for checkpoints and tools ----------------------------------------------------------------

void Engine::gather_all_params() { residency_->gather_all_now(); }

void Engine::enable_ema(const EmaConfig& config) {
  ZEST_CHECK(config.enabled, "enable_ema: the [ema] configuration is not enabled");
  ema_ = std::make_unique<ShardedEma>(config, buffers_->master());
}

EngineState Engine::layout_state() {
  EngineState s;
  s.rank = comm_->rank();
  s.world_size = comm_->size();
  s.stage = config_.stage;
  for (size_t u = 0; u < units_.size(); ++u)
    s.units.push_back({units_[u].layout(), units_[u].owned(), units_[u].in_flat()});
  s.shards.push_back({kMasterShard, buffers_->master()});
  for (auto& [name, tensor] : optimizer_->state_tensors()) s.shards.push_back({name, tensor});
  if (ema_) s.shards.push_back({kEmaShard, ema_->shard()});
  s.configs = {config_, optimizer_->config(), schedule_, ema_ ? std::optional(ema_->config()) : std::nullopt};
  return s;
}

EngineState Engine::state() {
  EngineState s = layout_state();
  s.counters = {step_count_,    optimizer_->step_count(), skipped_total(), current_lr(),
                loss_scaler_.enabled(), loss_scaler_.state()};
  return s;
}

namespace {

// Every shard of `live` has its counterpart in `loaded` (an EMA may be missing: it restarts), and
// `loaded` has no shard `live` does not know but an EMA.
void check_loadable_shards(const EngineState& live, const EngineState& loaded) {
  for (const NamedShard& own : live.shards) {
    const NamedShard* source = loaded.find_shard(own.name);
    if (!source && own.name == kEmaShard) continue;
    ZEST_CHECK(source, "load_state: the state has no '", own.name, "' shard");
    ZEST_CHECK(source->flat.dim() == 1 && source->flat.numel() == own.flat.numel() &&
                   source->flat.scalar_type() == torch::kFloat32,
               "load_state: shard '", own.name, "' is ", source->flat.scalar_type(), " of ", source->flat.numel(),
               " elements in the state, fp32 of ", own.flat.numel(), " in this engine");
  }
  for (const NamedShard& other : loaded.shards)
    ZEST_CHECK(live.find_shard(other.name) || other.name == kEmaShard, "load_state: the state's shard '",
               other.name, "' is not one of this engine's (another optimizer?)");
}

}  // namespace

void Engine::load_state(const EngineState& loaded) {
  const EngineState live = layout_state();
  check_same_layout(live, loaded, "load_state");
  check_loadable_shards(live, loaded);
  torch::NoGradGuard no_grad;
  buffers_->master().copy_(loaded.shard(kMasterShard));
  for (const auto& [name, tensor] : optimizer_->state_tensors()) tensor.copy_(loaded.shard(name));
  if (ema_) {  // a state without one: the EMA restarts from the loaded weights
    const NamedShard* saved = loaded.find_shard(kEmaShard);
    ema_->load_shard(saved ? saved->flat : buffers_->master());
  }
  const StepCounters& c = loaded.counters;
  optimizer_->set_step_count(c.optimizer_step);
  step_count_ = c.step;
  set_skipped_total(c.skipped_total);
  if (loss_scaler_.enabled() && c.loss_scale_enabled) loss_scaler_.load_state(c.loss_scaler);
  refresh_params_from_master();
}

int64_t Engine::skipped_total() const {
  return static_cast<int64_t>(scalars_[offsetof(StepScalars, skipped_total) / sizeof(double)].item<double>());
}

void Engine::set_skipped_total(int64_t count) {
  torch::NoGradGuard no_grad;
  scalars_[offsetof(StepScalars, skipped_total) / sizeof(double)].fill_(static_cast<double>(count));
}

double Engine::current_lr() const {
  return scheduled_lr(rules_, scalars_[kAppliedStepsIndex].item<double>());
}

void Engine::refresh_params_from_master() {
  torch::NoGradGuard no_grad;
  residency_->join_gathers();  // a gather in flight reads the slices overwritten here
  for (size_t u = 0; u < units_.size(); ++u) {
    const torch::Tensor slice = buffers_->param_shard(u);
    if (slice.defined()) slice.copy_(buffers_->master(u));  // undefined: stage 3's gathers cast the master
  }
  residency_->slices_updated(/*wait_all=*/true);  // stage 3: regathered on demand
}

ModelStateBytes Engine::model_state_bytes() const {
  ModelStateBytes bytes;
  bytes.params = buffers_->param_bytes();
  // With updates in backward, per-step gradients live a bucket or two at a time: transient, as stage 2's
  // buckets are, not model state.
  const bool grads_go_in_backward = update_in_backward_ && buffers_->has_per_step_grads();
  bytes.grads = grads_go_in_backward ? 0 : buffers_->grad_bytes();
  bytes.master = buffers_->master().nbytes();
  for (const auto& [name, tensor] : optimizer_->state_tensors()) bytes.optimizer += tensor.nbytes();
  if (ema_) bytes.ema = ema_->bytes();
  if (offload_) {
    bytes.offloaded = true;
    bytes.staging = offload_->staging_bytes();
  }
  return bytes;
}

int64_t Engine::num_parameters() const {
  int64_t n = 0;
  for (const auto& unit : units_) n += unit.layout().numel;
  return n;
}

}  // namespace zest
