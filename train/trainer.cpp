// `zest train`: assembly in a fixed order (signals → threads → run folders → model → engine → data →
// resume → logging), then the step loop, read top to bottom like llm.c's: micro-batches → backward →
// step → agree on stop → report (on logged steps) → checkpoint.
#include "train/trainer.h"

#include "checkpoint/directory.h"
#include "checkpoint/load.h"
#include "checkpoint/manifest.h"
#include "checkpoint/merge.h"
#include "checkpoint/save.h"
#include "comm/collective_timeout.h"
#include "comm/world.h"
#include "core/check.h"
#include "engine/device_placement.h"
#include "engine/engine.h"
#include "engine/preflight.h"
#include "engine/step_graphs.h"
#include "formats/json_field.h"
#include "kernels/fused_paths.h"
#include "models/lora_file.h"
#include "models/lora_run.h"
#include "models/model_resolve.h"
#include "models/pretrained_load.h"
#include "profiling/device_memory.h"
#include "profiling/process_stats.h"
#include "profiling/step_trace.h"
#include "train/activation_check.h"
#include "train/error_report.h"
#include "train/memory_budget.h"
#include "train/multi_node.h"
#include "train/progress.h"
#include "train/run_folder.h"
#include "train/step_failure.h"
#include "train/stop_signal.h"
#include "train/tensorboard_log.h"
#include "train/train_data.h"
#include "train/validation_samples.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <optional>
#include <thread>

namespace zest {
namespace {

namespace fs = std::filesystem;

void set_threads(const EngineConfig& engine, const Communicator& comm) {
  if (engine.threads > 0) return;  // the engine applies an explicit count itself
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  at::set_num_threads(std::max(1, cores / std::max(1, comm.local_size())));
}

// Noise and timesteps of micro-batch `micro` of step `step` on `rank`: a pure function of the seed, so
// a resumed run draws exactly what the uninterrupted one would have.
uint64_t micro_batch_seed(int64_t seed, int rank, int64_t step, int micro) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ static_cast<uint64_t>(seed);
  for (uint64_t v : {static_cast<uint64_t>(rank), static_cast<uint64_t>(step), static_cast<uint64_t>(micro)}) {
    h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
  }
  return h & 0x7FFFFFFFFFFFFFFFull;
}

checkpoint::SaveRequest save_request(const RunConfig& config, const ResolvedModel& model) {
  auto request = checkpoint::SaveRequest::from_config(config.checkpoint);
  request.model_name = model.name;
  request.model_config = model.toml_text;
  return request;
}

// What the steps since the previous report add up to on this rank. The loss stays a tensor on the
// device, so a step never waits for it; a report reads it (the one device synchronisation).
struct Window {
  torch::Tensor loss_sum;  // float64 sum of the micro-batch losses
  int64_t micro_batches = 0;
  int64_t steps = 0;
  int64_t items = 0;
  double started_s = 0.0;
  double data_wait_s = 0.0;  // host time the loop waited for batches
};

// Also restarts the GPU's peak memory figures, so that a record shows the peak of its own steps.
Window new_window(torch::Device device) {
  reset_peak_device_memory(device);
  return {torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat64).device(device)), 0, 0, 0, now_seconds()};
}

// One small CPU collective per step: whether any rank got a stop signal, so that all stop after the same step.
bool agree_stop(Communicator& comm) {
  auto flag = torch::tensor({stop_requested() ? 1.0 : 0.0}, torch::kFloat64);
  comm.allreduce(flag, ReduceOp::max)->wait();
  return flag.item<double>() > 0.0;
}

// The window's figures agreed over ranks (collective): the mean loss over every micro-batch of every
// rank, the slowest rank's time, the largest memory; lr, scale and norm are those of the last step.
StepRecord report_window(Communicator& comm, const Window& w, const StepStats& stats, double global_batch,
                         const torch::Device& device) {
  const double local_loss = w.loss_sum.item<double>();  // waits for the device
  const double local_s = now_seconds() - w.started_s;
  auto sums = torch::tensor({local_loss, static_cast<double>(w.micro_batches), static_cast<double>(w.items)},
                            torch::kFloat64);
  const DeviceMemoryStats gpu = device.is_cuda() ? device_memory_stats(device) : DeviceMemoryStats{-1, -1};
  auto maxes = torch::tensor({local_s, static_cast<double>(gpu.peak_allocated_bytes),
                              static_cast<double>(gpu.peak_reserved_bytes), static_cast<double>(resident_memory_bytes()),
                              static_cast<double>(peak_memory_bytes()), w.data_wait_s},
                             torch::kFloat64);
  auto w1 = comm.allreduce(sums, ReduceOp::sum);
  auto w2 = comm.allreduce(maxes, ReduceOp::max);
  w1->wait();
  w2->wait();
  const double seconds = std::max(maxes[0].item<double>(), 1e-9);
  StepRecord r;
  r.step = stats.step;
  r.steps = w.steps;
  r.loss = sums[0].item<double>() / std::max(1.0, sums[1].item<double>());
  r.lr = stats.lr;
  r.loss_scale = stats.loss_scale;
  r.grad_norm = stats.grad_norm;
  r.skipped = stats.skipped;
  r.skipped_total = stats.skipped_total;
  r.step_ms = seconds * 1000.0 / static_cast<double>(std::max<int64_t>(1, w.steps));
  r.samples_per_s = global_batch * static_cast<double>(w.steps) / seconds;
  r.items_per_s = sums[2].item<double>() / seconds;
  r.gpu_peak_allocated_bytes = static_cast<int64_t>(maxes[1].item<double>());
  r.gpu_peak_reserved_bytes = static_cast<int64_t>(maxes[2].item<double>());
  r.host_rss_bytes = static_cast<int64_t>(maxes[3].item<double>());
  r.host_peak_rss_bytes = static_cast<int64_t>(maxes[4].item<double>());
  r.data_wait_ms = maxes[5].item<double>() * 1000.0 / static_cast<double>(std::max<int64_t>(1, w.steps));
  return r;
}

// The last save's figures on this rank (rank 0 writes the record).
void add_save_figures(StepRecord& record, const checkpoint::SaveFigures& save) {
  record.saved = true;
  record.checkpoint_stall_ms = save.stall_ms;
  record.checkpoint_wait_ms = save.waited_ms;
  record.checkpoint_staging_bytes = save.staging_bytes;
}

// Noise and timesteps are drawn where the batch lives: a CUDA generator on a GPU (reseeded per
// micro-batch like the CPU one, so a resumed run draws what the uninterrupted one would have).
torch::Generator noise_generator(const torch::Device& device) {
  if (device.is_cuda()) return at::globalContext().defaultGenerator(device).clone();
  return at::detail::createCPUGenerator(0);
}

// The checkpoint's caller object: {"data": <TrainData::state()>, "seed": S, "model_source": ..., "lora": ...};
// errors name the manifest and the field ("extra.data.epoch").
JsonDocument saved_extra(const checkpoint::LoadedState& loaded) {
  return checkpoint::extra_record(loaded.extra_json, (fs::path(loaded.path) / checkpoint::kManifestName).string());
}

// One `zest train` run, assembled by the constructor; `phase` always says what it is doing, for errors.
class TrainRun {
 public:
  TrainRun(const RunConfig& config, const TrainOptions& options, std::string& phase, StepContext& step_context);
  TrainOutcome train();

 private:
  void resume();
  void step_once(Window& window);
  void save_now();
  void finish(const TrainOutcome& outcome);
  void start_watching();  // TensorBoard files and step traces (rank 0 / every rank), after a resume
  void write_lora_files(checkpoint::MergeOptions merge, bool with_ema);

  const RunConfig& config_;
  std::string& phase_;
  StepContext& step_context_;  // what a step is doing, for an out-of-memory report (train/step_failure.h)
  std::shared_ptr<Communicator> comm_;
  RunLock run_lock_;  // rank 0: this run owns train.run_dir until it ends
  ResolvedModel resolved_;
  std::shared_ptr<UnitModule> model_;
  nlohmann::json model_source_;  // where the weights came from (pretrained folder), kept for exports
  std::optional<LoraRecord> lora_;  // [lora]: what the checkpoints record of the adapters
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<TrainData> data_;
  checkpoint::SaveRequest request_;
  std::unique_ptr<ProgressReporter> progress_;
  std::unique_ptr<ValidationSamples> samples_;  // [sample]
  std::unique_ptr<TensorBoardLog> tensorboard_;  // [log] tensorboard (train/tensorboard_log.h)
  std::unique_ptr<StepTrace> trace_;             // [profile] steps (profiling/step_trace.h)
  checkpoint::Saver saver_;
  // One noise generator per micro-batch of a step, each reseeded per step (micro_batch_seed): a captured
  // step replays them all, and a resumed run draws what the uninterrupted one would have.
  std::vector<torch::Generator> generators_;
  TrainingObjective objective_;  // the family's objective with the run's [loss]
  std::unique_ptr<StepGraphs> graphs_;  // every step goes through it: a CUDA graph where one can be captured
  int64_t last_saved_ = -1;      // step of the newest checkpoint of this run (resumed or written)
  bool already_finished_ = false;  // resumed at or past max_steps
  std::string resume_from_;        // the step folder rank 0 chose for every rank ("" = fresh start)
  bool own_checkpoint_folder_ = false;  // shared_fs = false: this rank commits its node's folders
};

TrainRun::TrainRun(const RunConfig& config, const TrainOptions& options, std::string& phase,
                   StepContext& step_context)
    : config_(config), phase_(phase), step_context_(step_context), comm_(world_communicator()) {
  phase_ = "preparing the run folders";
  set_threads(config.engine, *comm_);
  // [engine.kernels], once for the run; the engine (and so each checkpoint's manifest) records what is in force.
  EngineConfig engine_config = config.engine;
  engine_config.kernels = apply_run_kernels(config, comm_->rank() == 0);
  run_lock_ = prepare_run_folders(config, options.resume, *comm_);
  own_checkpoint_folder_ = check_checkpoint_folder(config, *comm_);
  resume_from_ = agreed_resume_point(config, options.resume, *comm_);  // decided once, on rank 0
  // The seed makes every rank build the same initial weights.
  phase_ = "building the model";
  torch::manual_seed(config.train.seed);
  resolved_ = resolve_run_model(config);
  phase_ = "setting up the training objective";
  objective_ = resolved_.family->make_training_loss(config.loss, resolved_.pretrained);  // [loss] errors early
  // Before the model is built (minutes for a 10B model): refuse a run whose model state cannot fit.
  phase_ = "checking that the model state fits the device";
  check_fits(run_preflight_inputs(config, resolved_, comm_->size(), config.ema.enabled), place_engine(config.engine, *comm_),
             comm_->local_size());
  phase_ = "building the model";
  model_ = build_model(resolved_);
  // Released weights, unless a checkpoint to resume from exists (it wins; the base is then not read).
  phase_ = "loading the pretrained weights";
  // A LoRA run's checkpoints hold only its adapters: its base is read on resume too.
  model_source_ = start_from_pretrained(*model_, resolved_, config.model, config.lora.enabled ? "" : resume_from_, *comm_);
  if (config.lora.enabled) {
    phase_ = "adding the LoRA adapters";
    lora_ = prepare_lora_model(*model_, config.lora, resolved_, config.train.seed, *comm_);
  }
  phase_ = "creating the engine";
  engine_ = std::make_unique<Engine>(model_, engine_config, config.optimizer, config.scheduler, comm_);
  if (config.ema.enabled) engine_->enable_ema(config.ema);  // a copy of the starting weights
  for (int micro = 0; micro < config.engine.accumulation_steps; ++micro)
    generators_.push_back(noise_generator(engine_->device()));
  graphs_ = std::make_unique<StepGraphs>(*engine_, generators_);
  phase_ = "opening the data";
  data_ = std::make_unique<TrainData>(config, resolved_, *comm_, engine_->device());
  // The model state is on the device now: refuse a batch whose activations cannot fit what is left.
  phase_ = "checking that the activations fit the device";
  step_context_.device = engine_->device();
  step_context_.checkpoint_dir = config.checkpoint.dir;
  step_context_.plan = activation_plan(
      config, resolved_, activation_shapes_of(data_->first_sample(), config.engine.precision, engine_->device()));
  step_context_.activation_budget =
      check_activations_fit(step_context_.plan, engine_->device(), comm_->local_size());
  request_ = save_request(config, resolved_);
  request_.own_folder = own_checkpoint_folder_;
  if (request_.async) {  // the host staging of asynchronous saves, allocated once, now
    phase_ = "allocating the checkpoint staging memory";
    saver_.reserve_staging(*engine_);
  }
  progress_ = std::make_unique<ProgressReporter>(comm_->rank() == 0, config.train.max_steps,
                                                 (fs::path(config.train.run_dir) / "metrics.jsonl").string(),
                                                 data_->items_name());
  samples_ = std::make_unique<ValidationSamples>(config.sample, config.model, resolved_.family->name, config.train.run_dir,
                                                 config.loss);
  if (lora_) samples_->use_lora(*lora_);  // the pipeline's UNet with the run's adapters
  if (!resume_from_.empty()) resume();
  start_watching();
}

void TrainRun::start_watching() {
  phase_ = "opening the TensorBoard files";
  TensorBoardLog::Setup setup{config_.train.run_dir, comm_->size(), data_->items_name(), engine_->step_count(),
                              to_toml(config_)};
  tensorboard_ = std::make_unique<TensorBoardLog>(comm_->rank() == 0 && config_.log.tensorboard, setup);
  const ProfileConfig& profile = config_.profile;
  const int64_t first = profile.enabled() ? profile.steps[0] : 1, last = profile.enabled() ? profile.steps[1] : 0;
  trace_ = std::make_unique<StepTrace>(tensorboard_dir(config_.train.run_dir), comm_->rank(), comm_->size(), first,
                                       last, engine_->device().is_cuda());
}

void TrainRun::resume() {
  phase_ = "resuming";
  const auto loaded = checkpoint::load(*engine_, {resume_from_, request_.model_name, request_.model_config, true});
  const JsonDocument extra = saved_extra(loaded);
  data_->load_state(extra.root().at("data"), loaded.saved_world_size);
  last_saved_ = loaded.step;
  already_finished_ = loaded.step >= config_.train.max_steps;
  progress_->message("resumed from " + loaded.path + " at step " + std::to_string(loaded.step) +
                     (loaded.saved_world_size != comm_->size()
                          ? " (saved by " + std::to_string(loaded.saved_world_size) + " ranks)" : ""));
  if (already_finished_)
    progress_->message(str("the run is complete: its checkpoint is at step ", loaded.step, " and train.max_steps is ",
                           config_.train.max_steps, "; nothing to train (raise train.max_steps to continue)"));
}

void TrainRun::step_once(Window& window) {
  const int64_t step = engine_->step_count();
  phase_ = str("training step ", step + 1);
  set_collective_step(step + 1);  // named by a collective that times out
  step_context_.step = step + 1;
  reach_step_start(step + 1);
  std::vector<StepGraphs::Inputs> micro_batches;
  for (int micro = 0; micro < config_.engine.accumulation_steps; ++micro) {
    // On a GPU, already there: copied ahead on a side stream, the compute stream waiting on its event.
    // Named as torch.profiler names a DataLoader's next(), so TensorBoard's profile tab counts it as data loading.
    StepTrace::Phase waiting = trace_->phase("enumerate(DataLoader)#TrainData.__next__");
    HostBatch batch = data_->next_for_step();
    waiting.end();
    window.data_wait_s += data_->last_wait_s();
    if (step_context_.batch_shapes.empty()) step_context_.batch_shapes = describe_batch(batch.tensors);  // all alike
    window.items += batch.items;  // counted on the host batch: no device read
    generators_[static_cast<size_t>(micro)].set_current_seed(micro_batch_seed(config_.train.seed, comm_->rank(), step, micro));
    micro_batches.push_back(std::move(batch.tensors));
  }
  saver_.order_before_update();  // an asynchronous save's copy of the shard comes before this step's update
  // Forward and backward of every micro-batch, then the optimizer step: eagerly, or one graph replay.
  StepTrace::Phase body = trace_->step_body();
  const int64_t captures = graphs_->captures(), replays = graphs_->replays();
  const torch::Tensor losses = graphs_->step(micro_batches, [this](const StepGraphs::Inputs& inputs, int micro) {
    const StepTrace::Phase forward = trace_->forward_phase(micro);
    return objective_.loss(*model_, inputs, generators_[static_cast<size_t>(micro)]);
  });
  trace_->end_step_body(body, graphs_->captures() > captures  ? StepTrace::StepKind::graph_capture
                              : graphs_->replays() > replays ? StepTrace::StepKind::graph_replay
                                                             : StepTrace::StepKind::eager);
  window.loss_sum += losses.sum().to(torch::kFloat64);
  window.micro_batches += config_.engine.accumulation_steps;
  ++window.steps;
}

void TrainRun::save_now() {
  phase_ = str("saving the checkpoint of step ", engine_->step_count());
  auto r = request_;
  nlohmann::json extra{{"data", data_->state()}, {"seed", config_.train.seed}, {"model_source", model_source_}};
  if (lora_) extra["lora"] = lora_->to_json();
  r.extra_json = extra.dump();
  const std::string path = saver_.save(*engine_, r);
  last_saved_ = engine_->step_count();
  const checkpoint::SaveFigures& save = saver_.last_save();
  if (save.waited_for_previous)
    progress_->message(str("checkpoint: waited ", static_cast<int64_t>(save.waited_ms), " ms for the save of step ",
                           save.previous_step, " to finish writing (checkpoint.every_steps is shorter than a write)"));
  progress_->message("checkpoint " + path +
                     (r.async ? str(" (writing in the background; training stood still ",
                                    static_cast<int64_t>(save.stall_ms), " ms)")
                              : std::string()));
}

TrainOutcome TrainRun::train() {
  const int64_t global_batch =
      static_cast<int64_t>(config_.data.batch_size) * comm_->size() * config_.engine.accumulation_steps;
  progress_->message(str("zest train: ", resolved_.description, ", ", engine_->num_parameters(), " parameters, ",
                         comm_->size(), " rank(s), stage ", config_.engine.stage, ", ",
                         to_string(config_.engine.precision), ", global batch ", global_batch));
  progress_->message("objective: " + objective_.description);
  if (request_.async)
    progress_->message(str("asynchronous checkpoints copy this rank's shard into ", format_bytes(saver_.staging_bytes()),
                           engine_->master_shard().is_cuda() ? " of page-locked" : " of", " host memory, allocated once"));
  TrainOutcome outcome;
  if (agree_stop(*comm_)) {  // a stop signal during start-up: nothing trained, nothing to save
    progress_->message("stop signal received before the first step: stopped without training");
    outcome.preempted = true;
    outcome.final_step = engine_->step_count();
    return outcome;
  }
  Window window = new_window(engine_->device());
  bool fused_paths_said = false;
  while (engine_->step_count() < config_.train.max_steps) {
    trace_->begin_step(engine_->step_count() + 1);
    step_once(window);  // never waits for the device; a skipped step is reported by the engine itself
    if (!fused_paths_said) {  // after the first step, every layer has chosen: say which fused path fell back
      fused_paths_said = true;
      for (const std::string& line : fused_path_fallback_lines()) progress_->message("zest train: " + line);
    }
    saver_.poll(*comm_);
    StepTrace::Phase agreeing = trace_->phase("agree on stopping (collective)");
    const bool stop = agree_stop(*comm_);  // the same answer on every rank, as are the conditions below
    agreeing.end();
    const int64_t done = engine_->step_count();
    const bool save_due = stop || done == config_.train.max_steps ||
                          (config_.checkpoint.every_steps > 0 && done % config_.checkpoint.every_steps == 0);
    // A save comes before its step's record, which carries how long training stood still for it.
    if (save_due) {
      const StepTrace::Phase saving = trace_->phase("checkpoint save");
      save_now();
    }
    if (samples_->due(done)) {
      const StepTrace::Phase sampling = trace_->phase("validation samples");
      const ValidationFiles written = samples_->run(*engine_, *comm_, done, *progress_);  // rank 0 writes
      tensorboard_->pictures(done, picture_tags(config_.sample.prompts, written.pictures_by_prompt));
    }
    if (done % config_.train.log_every == 0 || save_due) {
      const StepTrace::Phase reporting = trace_->phase("read and report the step's figures");
      const StepStats stats = engine_->read_stats();  // the host reads numbers on logging steps only
      StepRecord record = report_window(*comm_, window, stats, static_cast<double>(global_batch), engine_->device());
      if (save_due) add_save_figures(record, saver_.last_save());
      progress_->record(record);
      tensorboard_->record(record);
      outcome.last_loss = record.loss;
      window = new_window(engine_->device());
    }
    trace_->end_step(done);
    if (stop) {
      progress_->message(str("stop signal received: stopped after step ", done, " with a checkpoint"));
      outcome.preempted = true;
      break;
    }
  }
  finish(outcome);
  outcome.final_step = engine_->step_count();
  return outcome;
}

void TrainRun::finish(const TrainOutcome& outcome) {
  if (last_saved_ != engine_->step_count()) save_now();
  saver_.wait(*comm_);
  progress_->finish();
  tensorboard_->finish();
  trace_->finish();  // a run stopped inside [profile] steps: the steps it recorded
  const auto merged = (fs::path(config_.train.run_dir) / "model.safetensors").string();
  // With [ema], the EMA of the weights too, under the same names.
  const auto merged_ema = (fs::path(config_.train.run_dir) / "model_ema.safetensors").string();
  const bool with_ema = engine_->ema() != nullptr;
  // A complete run that was merged before is not merged again (nor saved again, above).
  const bool merged_before = fs::exists(merged) && (!with_ema || fs::exists(merged_ema));
  if (!config_.checkpoint.merge_at_end || outcome.preempted || (already_finished_ && merged_before)) return;
  phase_ = "merging the final checkpoint";
  checkpoint::MergeOptions merge;
  merge.model_name = resolved_.name;
  if (lora_) return write_lora_files(merge, with_ema);
  checkpoint::merge_online(*engine_, merged, merge);
  progress_->message("merged model: " + merged);
  if (!with_ema) return;
  merge.ema = true;
  checkpoint::merge_online(*engine_, merged_ema, merge);
  progress_->message("merged EMA of the weights: " + merged_ema);
}

// A LoRA run's merge: the adapters as diffusers/peft load them, RUN/pytorch_lora_weights.safetensors (and
// RUN/ema/ with the EMA's); `zest merge --format diffusers|safetensors` folds them into the base.
void TrainRun::write_lora_files(checkpoint::MergeOptions merge, bool with_ema) {
  merge.name_prefix = lora_name_prefix(resolved_.family->name);
  merge.extra_metadata = lora_file_metadata(resolved_.family->name, *lora_);
  const auto file = (fs::path(config_.train.run_dir) / kLoraFileName).string();
  checkpoint::merge_online(*engine_, file, merge);
  progress_->message("LoRA adapters: " + file);
  if (!with_ema) return;
  merge.ema = true;
  if (comm_->rank() == 0) fs::create_directories(fs::path(config_.train.run_dir) / "ema");
  const auto ema_file = (fs::path(config_.train.run_dir) / "ema" / kLoraFileName).string();
  checkpoint::merge_online(*engine_, ema_file, merge);
  progress_->message("LoRA adapters, EMA: " + ema_file);
}

// A LibTorch or allocation failure, said with what the run was doing; memory running out in a step is
// reported with the step's shapes and what would fit (train/step_failure.h).
Error explain_failure(const std::exception& error, const std::string& phase, const StepContext& step) {
  if (is_out_of_memory(error) && phase.rfind("training", 0) == 0) return Error(out_of_memory_report(error, step));
  return Error(describe_error(error) + " (while " + phase + ")");
}

}  // namespace

TrainOutcome run_training(const RunConfig& config, const TrainOptions& options) {
  // First, so that a stop or a vanished launcher during start-up is seen, and output that has nowhere
  // to go cannot kill the rank (train/stop_signal.h).
  ignore_write_signals();
  install_stop_handlers();
  stop_when_launcher_exits();
  configure_rendezvous(config);  // before the world communicator exists
  std::string phase = "starting";
  StepContext step;
  try {
    TrainRun run(config, options, phase, step);
    return run.train();
  } catch (const Error&) {
    throw;
  } catch (const std::exception& error) {
    throw explain_failure(error, phase, step);
  }
}

}  // namespace zest
