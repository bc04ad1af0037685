// `zest bench` (see bench.h): assembly as in `zest train` (no data loader), warm-up, a FLOP-counting
// step, timed steps, and the agreed figures.
#include "train/bench.h"

#include "comm/exposure.h"
#include "comm/world.h"
#include "core/check.h"
#include "core/field_table.h"
#include "core/kernel_switches.h"
#include "engine/device_placement.h"
#include "engine/engine.h"
#include "engine/preflight.h"
#include "engine/step_graphs.h"
#include "kernels/fused_paths.h"
#include "models/lora_run.h"
#include "models/model_resolve.h"
#include "profiling/device_memory.h"
#include "profiling/flop_counter.h"
#include "profiling/kernel_profile.h"
#include "profiling/process_stats.h"
#include "profiling/step_trace.h"
#include "train/activation_check.h"

#include <sys/resource.h>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <thread>

namespace zest {

namespace {

// A generator on the engine's device: noise and timesteps are drawn where the batch lives.
torch::Generator device_generator(const torch::Device& device, uint64_t seed) {
  torch::Generator gen = device.is_cuda() ? at::globalContext().defaultGenerator(device).clone()
                                          : at::detail::createCPUGenerator(seed);
  gen.set_current_seed(seed);
  return gen;
}

void synchronize(const torch::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

// Slowest rank per step, then min/median/max over the steps.
nlohmann::json step_ms_summary(Communicator& comm, std::vector<double> step_ms) {
  auto t = torch::tensor(step_ms, torch::kFloat64);
  comm.allreduce_sync(t, ReduceOp::max);
  std::vector<double> slowest(t.data_ptr<double>(), t.data_ptr<double>() + t.numel());
  std::sort(slowest.begin(), slowest.end());
  const size_t n = slowest.size();
  const double median = n % 2 ? slowest[n / 2] : 0.5 * (slowest[n / 2 - 1] + slowest[n / 2]);
  return {{"min", slowest.front()}, {"median", median}, {"max", slowest.back()}};
}

double mean_over_ranks(Communicator& comm, double value) {
  auto t = torch::tensor({value}, torch::kFloat64);
  comm.allreduce_sync(t, ReduceOp::sum);
  return t.item<double>() / comm.size();
}

double max_over_ranks(Communicator& comm, double value) {
  auto t = torch::tensor({value}, torch::kFloat64);
  comm.allreduce_sync(t, ReduceOp::max);
  return t.item<double>();
}

SyntheticShapes resolve_shapes(const RunConfig& config, SyntheticShapes shapes) {
  if (shapes.length == 0 && config.data.seq_len > 0) shapes.length = config.data.seq_len;
  return shapes;
}

}  // namespace

namespace {

// The losses of a --loss-curve run, read from the device once at the end.
std::vector<double> curve_values(const std::vector<torch::Tensor>& losses) {
  const torch::Tensor host = torch::stack(losses).to(torch::kCPU, torch::kFloat64).contiguous();
  return {host.data_ptr<double>(), host.data_ptr<double>() + host.numel()};
}

}  // namespace

nlohmann::json run_bench(const RunConfig& config, const BenchOptions& options) {
  ZEST_CHECK(options.steps >= 1 && options.warmup >= 0, "bench: --steps must be >= 1 and --warmup >= 0");
  auto comm = world_communicator();
  if (config.engine.threads == 0) {
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    at::set_num_threads(std::max(1, cores / std::max(1, comm->local_size())));
  }
  torch::manual_seed(config.train.seed);
  const KernelsConfig kernels_in_force = apply_run_kernels(config, comm->rank() == 0);  // [engine.kernels]
  const ResolvedModel resolved = resolve_model(config.model);
  check_fits(run_preflight_inputs(config, resolved, comm->size(), /*ema=*/false), place_engine(config.engine, *comm),
             comm->local_size());  // before building a model that cannot fit
  auto model = build_model(resolved);
  // [lora]: the seeded base frozen in the compute dtype, only the adapters trained, as in `zest train`.
  if (config.lora.enabled) prepare_lora_model(*model, config.lora, resolved, config.train.seed, *comm);
  Engine engine(model, config.engine, config.optimizer, config.scheduler, comm);
  const torch::Device device = engine.device();
  const ModelFamily& family = *resolved.family;
  ZEST_CHECK(family.synthetic_batch != nullptr, "bench: family ", family.name, " has no synthetic batches");

  // The synthetic batches and the noise follow [train] seed (0: the seed every earlier benchmark used).
  torch::Generator gen = device_generator(
      device, 1000 + static_cast<uint64_t>(comm->rank()) + 7919 * static_cast<uint64_t>(config.train.seed));
  const SyntheticShapes shapes = resolve_shapes(config, options.shapes);
  const int64_t batch = config.data.batch_size;
  std::vector<TensorMap> batches = {family.synthetic_batch(*model, shapes, batch, device, gen),
                                    family.synthetic_batch(*model, shapes, batch, device, gen)};
  if (family.prepare_batch)
    for (TensorMap& b : batches) family.prepare_batch(b);  // as the loader's batches are, ahead of the steps
  int64_t next = 0;
  torch::Tensor first_loss, last_loss;  // kept on the device, read once at the end (no sync per step)
  std::vector<torch::Tensor> loss_curve;  // with --loss-curve: each step's last loss, copied on the device
  // Every step goes through StepGraphs, as in `zest train`: captured and replayed where it can be.
  StepGraphs graphs(engine, {gen});
  const TrainingObjective objective = family.make_training_loss(config.loss, resolved.pretrained);  // as zest train
  const StepGraphs::LossFn loss_of = [&](const StepGraphs::Inputs& inputs, int) {
    return objective.loss(*model, inputs, gen);
  };
  auto one_step = [&] {
    std::vector<TensorMap> micro_batches;
    for (int m = 0; m < config.engine.accumulation_steps; ++m)
      micro_batches.push_back(batches[static_cast<size_t>(next++ % 2)]);
    const torch::Tensor losses = graphs.step(micro_batches, loss_of);
    last_loss = losses[-1];
    if (!first_loss.defined()) first_loss = losses[0];
    if (options.loss_curve) loss_curve.push_back(last_loss.clone());  // a replay rewrites the graph's output
  };

  // The FLOP-counting step first: it must run eagerly (a replayed graph dispatches no operators).
  int64_t flops = 0;
  std::map<std::string, int64_t> attention;
  {
    const FlopCounter counter;
    one_step();
    synchronize(device);
    flops = counter.flops();
    attention = counter.attention_calls();
  }
  int replayed_in_a_row = 0;
  auto warmup_step = [&] {
    const int64_t replays = graphs.replays();
    one_step();
    replayed_in_a_row = graphs.replays() > replays ? replayed_in_a_row + 1 : 0;
  };
  for (int i = 0; i < options.warmup; ++i) warmup_step();
  // With graphs, each batch shape is captured after eager steps of its own (HY-Motion's packed batches may fall
  // in two count buckets): more untimed steps until both batches' last steps were graphs, so that no capture is
  // timed (bounded: a shape past the graphs' cache stays eager).
  const int most_extra = 2 * static_cast<int>(batches.size()) * (StepGraphs::kWarmupSteps + 1);
  for (int i = 0; graphs.is_enabled() && replayed_in_a_row < static_cast<int>(batches.size()) && i < most_extra; ++i)
    warmup_step();
  synchronize(device);
  // With graphs, the peak is kept from the start: a replay allocates nothing, its memory was taken from
  // the pool while capturing (in the warm-up).
  if (!graphs.is_enabled()) reset_peak_device_memory(device);
  start_exposure_timing();
  std::vector<double> step_ms;
  for (int i = 0; i < options.steps; ++i) {
    const double t0 = now_seconds();
    one_step();
    synchronize(device);
    step_ms.push_back((now_seconds() - t0) * 1000.0);
  }
  const double exposed_ms = stop_exposure_timing_ms() / options.steps;
  const StepStats stats = engine.read_stats();
  const DeviceMemoryStats memory = device_memory_stats(device);
  // The same number of steps back to back, one device synchronize at the end, as `zest train` runs them:
  // what a step leaves running (the parameter allgather after the optimizer) may then overlap the next
  // step's forward, where the per-step synchronize above keeps it inside its own step.
  double pipelined_ms = 0;
  {
    const double t0 = now_seconds();
    for (int i = 0; i < options.steps; ++i) one_step();
    synchronize(device);
    pipelined_ms = max_over_ranks(*comm, (now_seconds() - t0) * 1000.0 / options.steps);
  }
  // After the timed steps, so the recorder's cost is not in them: on GPUs the kernels of one more step
  // (replayed, where graphs are on), or with --profile profile_steps more, traced (profiling/step_trace.h):
  // a Chrome trace per rank in the folder, and on GPUs the kernel tables beside it.
  nlohmann::json kernels;
  std::string trace_path;
  if (!options.profile_dir.empty()) {
    std::filesystem::create_directories(options.profile_dir);
    StepTrace trace(options.profile_dir, comm->rank(), comm->size(), 1, options.profile_steps, device.is_cuda());
    const std::string tables = "kernels_rank" + std::to_string(comm->rank()) + ".tsv";
    if (device.is_cuda()) trace.keep_kernel_tables((std::filesystem::path(options.profile_dir) / tables).string(), 25);
    for (int step = 1; step <= options.profile_steps; ++step) {
      trace.begin_step(step);
      StepTrace::Phase body = trace.step_body();
      const int64_t captures = graphs.captures(), replays = graphs.replays();
      one_step();
      trace.end_step_body(body, graphs.captures() > captures  ? StepTrace::StepKind::graph_capture
                                : graphs.replays() > replays ? StepTrace::StepKind::graph_replay
                                                             : StepTrace::StepKind::eager);
      StepTrace::Phase waiting = trace.phase("wait for the device");
      synchronize(device);
      waiting.end();
      trace.end_step(step);  // the last one writes the trace
    }
    kernels = trace.kernel_summary();
    trace_path = trace.written();
  } else if (device.is_cuda()) {
    KernelProfile recording;
    one_step();
    synchronize(device);
    kernels = recording.finish(1, "", 0);
  }

  const nlohmann::json ms = step_ms_summary(*comm, step_ms);
  // A benchmark that does not train is not one: the loss of the first and the last micro-batch (rank mean)
  // on the two synthetic batches the steps alternate between.
  const double loss_first = mean_over_ranks(*comm, first_loss.to(torch::kFloat64).item<double>());
  const double loss_last = mean_over_ranks(*comm, last_loss.to(torch::kFloat64).item<double>());
  const double median_s = ms["median"].get<double>() / 1000.0;
  const int64_t samples = batch * config.engine.accumulation_steps;
  const double tflops = static_cast<double>(flops) / median_s / 1e12;
  const auto state = engine.model_state_bytes();
  const bool offloaded = config.engine.offload_optimizer != OffloadTarget::none;
  MemoryModelInputs formula_inputs{engine.num_parameters(), comm->size(), config.engine.stage,
                                   config.engine.precision, config.engine.reduce_dtype,
                                   engine.optimizer().state_bytes_per_element(), false, offloaded,
                                   config.engine.offload_staging_bytes()};
  formula_inputs.optimizer_in_backward = config.engine.optimizer_in_backward;
  const auto formula = estimate_model_state_bytes(formula_inputs);
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);  // ru_maxrss: KiB on Linux
  const double peak_rss_gib = static_cast<double>(usage.ru_maxrss) * 1024.0;
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  // What the step needs beyond the model state the device holds: activations, transient gradient
  // buckets and workspace, per sample of the micro-batch (0 on the CPU, where no peak is tracked).
  const double beyond_state = std::max(0.0, memory.peak_allocated_bytes - static_cast<double>(state.on_device()));
  const double activation_bytes_per_sample = max_over_ranks(*comm, beyond_state / static_cast<double>(batch));
  const nlohmann::json launches = kernels.is_object() ? kernels.at("launches_per_step") : nlohmann::json();
  // Which fused kernels the steps took and which fell back (GPU only), each fallback also said in a line.
  nlohmann::json fused_paths = nlohmann::json::object();
  for (const FusedPathUse& use : fused_path_uses()) {
    fused_paths[use.path] = {{"taken", use.taken}, {"fell_back", use.fell_back},
                             {"why_not", use.fell_back > 0 ? nlohmann::json(use.why_not) : nlohmann::json()}};
  }
  if (comm->rank() == 0) {
    for (const std::string& line : fused_path_fallback_lines()) std::cerr << "zest bench: " << line << "\n";
  }
  int64_t frozen_parameters = 0;  // a LoRA run's base, outside the engine's model state
  for (const auto& parameter : model->parameters())
    if (!parameter.requires_grad()) frozen_parameters += parameter.numel();
  return {{"model", resolved.name},
          {"parameters", engine.num_parameters()},
          {"frozen_parameters", frozen_parameters},
          {"device", device.str()},
          {"world_size", comm->size()},
          {"stage", config.engine.stage},
          {"precision", to_string(config.engine.precision)},
          {"reduce_dtype", to_string(config.engine.reduce_dtype)},
          {"matmul", to_string(config.engine.matmul)},
          {"activation_checkpointing", to_string(config.engine.activation_checkpointing)},
          {"batch_size", batch},
          {"accumulation_steps", config.engine.accumulation_steps},
          {"length", shapes.length},
          {"steps", options.steps},
          {"warmup", options.warmup},
          {"step_ms", ms},
          {"samples_per_s", samples / median_s},
          {"pipelined_step_ms", pipelined_ms},
          {"pipelined_samples_per_s", samples / (pipelined_ms / 1000.0)},
          {"flops_per_step", flops},
          {"tflops", tflops},
          {"mfu", tflops / options.peak_tflops},
          {"peak_allocated_gib", max_over_ranks(*comm, memory.peak_allocated_bytes / kGiB)},
          {"peak_reserved_gib", max_over_ranks(*comm, memory.peak_reserved_bytes / kGiB)},
          // Of the reserved memory: the CUDA graphs' private pool, and the eager steps' cache it replaced.
          {"graph_pool_gib", max_over_ranks(*comm, static_cast<double>(graphs.pool_bytes()) / kGiB)},
          {"eager_cache_gib", max_over_ranks(*comm, static_cast<double>(graphs.eager_cache_bytes()) / kGiB)},
          {"offload_optimizer", to_string(config.engine.offload_optimizer)},
          {"model_state_bytes", state.total()},
          {"model_state_formula_bytes", formula.total()},
          {"model_state_device_bytes", state.on_device()},
          {"model_state_device_formula_bytes", formula.on_device()},
          {"model_state_host_bytes", state.on_host()},
          {"peak_host_rss_gib", max_over_ranks(*comm, peak_rss_gib / kGiB)},
          {"comm_exposed_ms", max_over_ranks(*comm, exposed_ms)},
          {"activation_bytes_per_sample", activation_bytes_per_sample},
          {"loss_first", loss_first},
          {"loss_last", loss_last},
          {"loss_curve", loss_curve.empty() ? nlohmann::json() : nlohmann::json(curve_values(loss_curve))},
          {"kernel_launches_per_step", launches},
          {"fused_paths", fused_paths},
          {"kernels", nlohmann::json::parse(record_json(kernels_fields().values(kernels_in_force)).dump())},
          {"cuda_graphs", graphs.is_enabled() ? std::string("on") : "off: " + graphs.disabled_reason()},
          {"graph_captures", graphs.captures()},
          {"graph_replays", graphs.replays()},
          {"attention_kernels", attention},
          {"last_loss_scale", stats.loss_scale},
          {"skipped_total", stats.skipped_total},
          {"profile", options.profile_dir.empty() ? nlohmann::json() : kernels},
          {"trace", trace_path.empty() ? nlohmann::json() : nlohmann::json(trace_path)}};
}

}  // namespace zest
