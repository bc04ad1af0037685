// Helpers for the checkpoint tests: a self-removing folder, a toy training run (ToyNet on the fixed
// global batch, optionally with an EMA of the weights), state capture for bitwise comparisons, and
// "error mentions all of these".
#pragma once

#include "common/temp_dir.h"

#include "checkpoint/checkpoint.h"
#include "engine/engine.h"
#include "engine/toy_models.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace zest::testing {

inline constexpr int64_t kGlobalBatch = 12;  // divisible by world sizes 1, 2, 3, 4
inline const char* kModelName = "toynet";
inline const char* kModelConfig = "[model]\nname = \"toynet\"\nwidth = 13\n\n[model.head]\nout = 5\n";

struct RunSpec {
  int stage = 2;
  bool sgd = false;
  int64_t seed = 7;  // parameter init; a loading run uses another seed to prove the load replaces it
  bool ema = false;  // keep an EMA of the weights (toy_ema())
  bool offload = false;  // [engine.offload] optimizer = "cpu"
  Precision precision = Precision::fp32;  // compute dtype (the master stays fp32)
};

// An EMA whose decay changes every step and that skips steps, so a wrong restored step count shows.
inline EmaConfig toy_ema() {
  EmaConfig c;
  c.enabled = true;
  c.decay = 0.9;
  c.use_ema_warmup = true;
  c.update_every = 2;
  c.start_step = 1;
  return c;
}

inline OptimConfig toy_optim(bool sgd) {
  OptimConfig c;
  c.name = sgd ? OptimizerKind::sgd : OptimizerKind::adamw;
  c.lr = sgd ? 0.05 : 3e-3;
  c.weight_decay = 0.1;
  return c;
}

inline SchedulerConfig toy_schedule() {
  SchedulerConfig s;  // warm-up + cosine: the LR depends on the restored step count
  s.name = ScheduleKind::cosine;
  s.warmup_steps = 3;
  s.decay_steps = 30;
  s.min_lr = 1e-4;
  return s;
}

struct ToyRun {
  std::shared_ptr<ToyNet> model;
  std::unique_ptr<Engine> engine;
};

inline ToyRun make_toy_run(std::shared_ptr<Communicator> comm, const RunSpec& spec,
                           std::shared_ptr<ToyNet> model = nullptr) {
  ToyRun run;
  if (model) {
    run.model = std::move(model);
  } else {  // ToyNet seeds the global generator: ranks on threads must not interleave their draws
    static std::mutex init_mutex;
    std::lock_guard<std::mutex> lock(init_mutex);
    run.model = std::make_shared<ToyNet>(spec.seed);
  }
  EngineConfig ec;
  ec.stage = spec.stage;
  ec.precision = spec.precision;
  ec.reduce_dtype = Precision::fp32;
  ec.clip_norm = 1.0;
  ec.offload_optimizer = spec.offload ? OffloadTarget::cpu : OffloadTarget::none;
  run.engine = std::make_unique<Engine>(run.model, ec, toy_optim(spec.sgd), toy_schedule(), std::move(comm));
  if (spec.ema) run.engine->enable_ema(toy_ema());
  return run;
}

// Optimizer steps [first, last) on the fixed global batches, each rank on its share.
inline void train_toy(ToyRun& run, int64_t first, int64_t last) {
  Communicator& comm = run.engine->comm();
  const int64_t local = kGlobalBatch / comm.size();
  for (int64_t step = first; step < last; ++step) {
    auto [x, y] = toy_batch(step, kGlobalBatch);
    auto xr = x.narrow(0, comm.rank() * local, local);
    auto yr = y.narrow(0, comm.rank() * local, local);
    run.engine->backward(torch::mse_loss(run.model->forward(xr), yr));
    run.engine->step();
    const auto stats = run.engine->read_stats();
    ASSERT_FALSE(stats.skipped);
  }
}

// Parameters by state-dict name (tied ones under each name), cloned.
inline std::map<std::string, torch::Tensor> params_of(torch::nn::Module& model) {
  std::map<std::string, torch::Tensor> out;
  for (const auto& item : model.named_parameters()) out[item.key()] = item.value().detach().clone();
  return out;
}

inline checkpoint::SaveRequest toy_save_request(const std::string& dir) {
  checkpoint::SaveRequest r;
  r.dir = dir;
  r.model_name = kModelName;
  r.model_config = kModelConfig;
  return r;
}

inline checkpoint::LoadRequest toy_load_request(const std::string& path) {
  return {path, kModelName, kModelConfig, true};
}

// Bitwise equality of two name → tensor maps.
inline void expect_bitwise_equal(const std::map<std::string, torch::Tensor>& a,
                                 const std::map<std::string, torch::Tensor>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (const auto& [name, t] : a) {
    ASSERT_TRUE(b.count(name)) << what << ": " << name;
    EXPECT_TRUE(torch::equal(t, b.at(name))) << what << ": " << name << " differs by "
                                             << (t - b.at(name)).abs().max().item<double>();
  }
}

// max |a-b| / max(|a|, 1e-3) over all tensors.
inline double max_relative_difference(const std::map<std::string, torch::Tensor>& a,
                                      const std::map<std::string, torch::Tensor>& b) {
  double worst = 0.0;
  for (const auto& [name, t] : a) {
    const double scale = std::max(t.abs().max().item<double>(), 1e-3);
    worst = std::max(worst, (t - b.at(name)).abs().max().item<double>() / scale);
  }
  return worst;
}

// Every counter a checkpoint restores, by name, and the learning rate that follows from them.
inline std::map<std::string, double> counters_of(Engine& engine) {
  const LossScalerState scaler = engine.loss_scaler().state();
  return {{"step", static_cast<double>(engine.step_count())},
          {"optimizer_step", static_cast<double>(engine.optimizer().step_count())},
          {"skipped_total", static_cast<double>(engine.skipped_total())},
          {"loss_scale", scaler.scale},
          {"clean_steps", static_cast<double>(scaler.clean_steps)},
          {"hysteresis_left", static_cast<double>(scaler.hysteresis_left)},
          {"overflows", static_cast<double>(scaler.overflows)},
          {"lr", engine.current_lr()}};
}

// The engine's complete resumable state on this rank: master, optimizer states, EMA (if kept), counters.
inline std::map<std::string, torch::Tensor> engine_state(Engine& engine) {
  std::map<std::string, torch::Tensor> out = {{"master", engine.master_shard().clone()}};
  for (const auto& [name, t] : engine.optimizer().state_tensors()) out[name] = t.clone();
  if (engine.ema()) out["ema"] = engine.ema()->shard().clone();
  for (const auto& [name, value] : counters_of(engine))
    out["counter " + name] = torch::tensor({value}, torch::kFloat64);
  return out;
}

// A flat fp32 shard laid out like the master (the master itself, or the EMA) as whole tensors by
// state-dict name (tied parameters under each name), the same on every rank. Collective: each rank
// contributes its slice of every unit ([rank·S, (rank+1)·S), as a checkpoint stores it) and a sum over
// the ranks (of one value and zeros) assembles the unit exactly.
inline std::map<std::string, torch::Tensor> flat_by_name(Engine& engine, const torch::Tensor& shard) {
  const torch::Tensor values = shard.to(torch::kCPU);
  const int rank = engine.comm().rank();
  std::map<std::string, torch::Tensor> out;
  for (size_t u = 0; u < engine.units().size(); ++u) {
    const Unit& unit = engine.units()[u];
    const ElementSpan slice = unit.layout().slice(rank), owned = unit.owned();
    auto full = torch::zeros({unit.layout().padded_numel}, torch::kFloat32);
    full.narrow(0, slice.begin, slice.numel)
        .copy_(values.narrow(0, unit.in_flat().begin + (slice.begin - owned.begin), slice.numel));
    engine.comm().allreduce(full, ReduceOp::sum)->wait();
    for (const ParamSlot& slot : unit.layout().slots) {
      const auto value = full.narrow(0, slot.offset, slot.numel).view(slot.shape).clone();
      out[slot.name] = value;
      for (const std::string& alias : slot.aliases) out[alias] = value;
    }
  }
  return out;
}

inline std::map<std::string, torch::Tensor> ema_by_name(Engine& engine) {
  return flat_by_name(engine, engine.ema()->shard());
}

inline std::map<std::string, torch::Tensor> master_by_name(Engine& engine) {
  return flat_by_name(engine, engine.master_shard());
}

inline void expect_error(const std::function<void()>& fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "expected an error mentioning '" << (parts.empty() ? "" : parts.front()) << "'";
  } catch (const zest::Error& e) {
    const std::string message = e.what();
    for (const std::string& part : parts)
      EXPECT_NE(message.find(part), std::string::npos) << "message lacks '" << part << "': " << message;
  }
}

}  // namespace zest::testing
