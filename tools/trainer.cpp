// `zest train`: assembly in a fixed order (threads → run dir → model → engine → data → resume →
// logging), then the step loop, read top to bottom like llm.c's: micro-batches → backward → step →
// agree on stop → log → checkpoint.
#include "tools/trainer.h"

#include "checkpoint/load.h"
#include "checkpoint/merge.h"
#include "checkpoint/directory.h"
#include "checkpoint/save.h"
#include "core/check.h"
#include "engine/engine.h"
#include "comm/world.h"
#include "models/model_resolve.h"
#include "models/pretrained_load.h"
#include "tools/progress.h"
#include "tools/stop_signal.h"
#include "tools/train_data.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <thread>

namespace zest {
namespace {

namespace fs = std::filesystem;

void set_threads(const EngineConfig& engine, const Communicator& comm) {
  if (engine.threads > 0) return;  // the engine applies an explicit count itself
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  at::set_num_threads(std::max(1, cores / std::max(1, comm.local_size())));
}

void prepare_run_dir(const RunConfig& config, Communicator& comm) {
  if (comm.rank() == 0) {
    fs::create_directories(config.train.run_dir);
    std::ofstream(fs::path(config.train.run_dir) / "config.toml") << to_toml(config);
  }
  comm.barrier();
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

// Per-step figures agreed over ranks: mean loss, slowest step time, largest memory, and whether any
// rank was asked to stop (so every rank stops after the same step).
struct AgreedStep {
  double loss = 0.0;
  double step_ms = 0.0;
  int64_t peak_mem_bytes = 0;
  bool stop = false;
};

AgreedStep agree(Communicator& comm, double local_loss, double local_ms) {
  auto sums = torch::tensor({local_loss}, torch::kFloat64);
  auto maxes = torch::tensor({local_ms, static_cast<double>(peak_memory_bytes()), stop_requested() ? 1.0 : 0.0},
                             torch::kFloat64);
  auto w1 = comm.allreduce(sums, ReduceOp::sum);
  auto w2 = comm.allreduce(maxes, ReduceOp::max);
  w1->wait();
  w2->wait();
  return {sums.item<double>() / comm.size(), maxes[0].item<double>(), static_cast<int64_t>(maxes[1].item<double>()),
          maxes[2].item<double>() > 0.0};
}

}  // namespace

TrainOutcome run_training(const RunConfig& config, const TrainOptions& options) {
  auto comm = world_communicator();
  const bool is_rank0 = comm->rank() == 0;
  set_threads(config.engine, *comm);
  prepare_run_dir(config, *comm);

  // ---- model and engine (the seed makes every rank build the same initial weights) ----
  torch::manual_seed(config.train.seed);
  const ResolvedModel resolved = resolve_model(config.model, config.source);
  auto model = build_model(resolved);
  // Released weights, unless a checkpoint to resume from exists (it wins; the base is then not read).
  const nlohmann::json model_source = start_from_pretrained(
      *model, resolved, config.model,
      options.resume ? checkpoint::find_latest(config.checkpoint.dir).value_or("") : std::string(), *comm);
  Engine engine(model, config.engine, config.optimizer, config.scheduler, comm);
  TrainData data(config, resolved, *comm);

  // ---- resume ----
  const auto request = save_request(config, resolved);
  ProgressReporter progress(is_rank0, config.train.max_steps, config.train.log_every,
                            (fs::path(config.train.run_dir) / "metrics.jsonl").string(), data.items_name());
  if (options.resume && checkpoint::find_latest(request.dir)) {
    const auto loaded = checkpoint::load(engine, {request.dir, request.model_name, request.model_config, true});
    data.load_state(nlohmann::json::parse(loaded.extra_json).at("data"));
    progress.message("resumed from " + loaded.path + " at step " + std::to_string(loaded.step) +
                     (loaded.saved_world_size != comm->size()
                          ? " (saved by " + std::to_string(loaded.saved_world_size) + " ranks)" : ""));
  }
  progress.message(str("zest train: ", resolved.description, ", ", engine.num_parameters(), " parameters, ",
                       comm->size(), " rank(s), stage ", config.engine.stage, ", ", to_string(config.engine.precision),
                       ", global batch ", config.data.batch_size * comm->size() * config.engine.accumulation_steps));

  // ---- training loop ----
  install_stop_handlers();
  checkpoint::Saver saver;
  auto save_now = [&] {
    auto r = request;
    r.extra_json =
        nlohmann::json{{"data", data.state()}, {"seed", config.train.seed}, {"model_source", model_source}}.dump();
    const std::string path = saver.save(engine, r);
    progress.message("checkpoint " + path + (r.async ? " (writing in the background)" : ""));
  };
  TrainOutcome outcome;
  int64_t last_saved = -1;
  torch::Generator generator = at::detail::createCPUGenerator(0);
  while (engine.step_count() < config.train.max_steps) {
    const double t0 = now_seconds();
    const int64_t step = engine.step_count();
    auto loss_sum = torch::zeros({}, torch::kFloat64);
    int64_t items = 0;
    for (int micro = 0; micro < config.engine.accumulation_steps; ++micro) {
      const TensorMap batch = data.next();
      items += data.items_in(batch);
      generator.set_current_seed(micro_batch_seed(config.train.seed, comm->rank(), step, micro));
      const auto loss = resolved.family->training_loss(*model, batch, generator);
      loss_sum += loss.detach().to(torch::kFloat64);
      engine.backward(loss);
    }
    const StepStats stats = engine.step();
    const double local_ms = (now_seconds() - t0) * 1000.0;
    const AgreedStep agreed = agree(*comm, loss_sum.item<double>() / config.engine.accumulation_steps, local_ms);
    saver.poll(*comm);

    StepRecord record;
    record.step = stats.step;
    record.loss = agreed.loss;
    record.lr = stats.lr;
    record.loss_scale = stats.loss_scale;
    record.grad_norm = stats.grad_norm;
    record.skipped = stats.skipped;
    record.skipped_total = stats.skipped_total;
    record.step_ms = agreed.step_ms;
    const double global = static_cast<double>(config.data.batch_size) * comm->size() * config.engine.accumulation_steps;
    record.samples_per_s = global / (agreed.step_ms / 1000.0);
    record.items_per_s = static_cast<double>(items) * comm->size() / (agreed.step_ms / 1000.0);
    record.peak_mem_bytes = agreed.peak_mem_bytes;
    progress.record(record);
    outcome.last_loss = agreed.loss;

    const bool is_due = config.checkpoint.every_steps > 0 && engine.step_count() % config.checkpoint.every_steps == 0;
    if (is_due || agreed.stop) {
      save_now();
      last_saved = engine.step_count();
    }
    if (agreed.stop) {
      progress.message(str("stop signal received: stopped after step ", engine.step_count(), " with a checkpoint"));
      outcome.preempted = true;
      break;
    }
  }
  if (last_saved != engine.step_count()) save_now();
  saver.wait(*comm);
  progress.finish();
  if (config.checkpoint.merge_at_end && !outcome.preempted) {
    checkpoint::MergeOptions merge;
    merge.model_name = resolved.name;
    const auto out = (fs::path(config.train.run_dir) / "model.safetensors").string();
    checkpoint::merge_online(engine, out, merge);
    progress.message("merged model: " + out);
  }
  outcome.final_step = engine.step_count();
  return outcome;
}

}  // namespace zest
