// custom_loop: a user's own training loop on the zest Engine API instead of `zest train`: a built-in
// HY-Motion configuration, synthetic batches, micro-batch accumulation, per-step stats on rank 0.
//   mpirun -np 2 ./custom_loop --steps 20        (or plainly ./custom_loop for one process)
#include "core/check.h"
#include "engine/engine.h"
#include "comm/world.h"
#include "models/hymotion/hymotion.h"
#include "models/model_resolve.h"

#include <ATen/CPUGeneratorImpl.h>
#include <CLI/CLI.hpp>
#include <torch/torch.h>

#include <cstdio>
#include <exception>

namespace {

struct Batch {
  torch::Tensor x1, ctxt, vtxt, x_mask, ctxt_mask;
};

torch::Generator generator(uint64_t seed) { return at::make_generator<at::CPUGeneratorImpl>(seed); }

// Motion x1[b, l, c] = sin(2π·(c+1)·l/L + φ_bc) whose phases φ are a fixed linear function of the pooled
// text feature: the model can only predict them from the text, so a falling loss means it learns.
Batch synthetic_batch(const zest::hymotion::HyMotionConfig& cfg, int64_t batch, int64_t frames,
                      int64_t text_tokens, uint64_t seed) {
  auto fixed = generator(1234);  // the same text → motion map for every batch and rank
  const auto proj = torch::randn({cfg.vtxt_input_dim, cfg.input_dim}, fixed) / std::sqrt(cfg.vtxt_input_dim);
  auto gen = generator(seed);
  Batch b;
  b.vtxt = torch::randn({batch, 1, cfg.vtxt_input_dim}, gen);
  b.ctxt = torch::randn({batch, text_tokens, cfg.ctxt_input_dim}, gen);
  const auto phase = torch::matmul(b.vtxt, proj);                           // [B, 1, C]
  const auto time = torch::arange(frames, torch::kFloat32).view({1, frames, 1}) / frames;
  const auto freq = torch::arange(1, cfg.input_dim + 1, torch::kFloat32).view({1, 1, cfg.input_dim});
  b.x1 = torch::sin(2 * M_PI * freq * time + phase);                        // [B, L, C]
  b.x_mask = torch::ones({batch, frames}, torch::kBool);
  b.ctxt_mask = torch::ones({batch, text_tokens}, torch::kBool);
  return b;
}

// The batch in the model's compute dtype (bf16 runs keep bf16 parameters; masks stay bool).
Batch to_dtype(Batch b, torch::Dtype dtype) {
  b.x1 = b.x1.to(dtype), b.ctxt = b.ctxt.to(dtype), b.vtxt = b.vtxt.to(dtype);
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"custom_loop: train a built-in HY-Motion configuration with the zest Engine API"};
  std::string model_name = "hymotion_tiny";
  int steps = 20, micro_batches = 2, batch = 4, frames = 32, stage = 2;
  double lr = 1e-3;
  std::string precision = "fp32";
  app.add_option("--model", model_name, "built-in HY-Motion configuration")->capture_default_str();
  app.add_option("--steps", steps, "optimizer steps")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--micro-batches", micro_batches, "micro-batches per step")->capture_default_str();
  app.add_option("--batch", batch, "samples per rank per micro-batch")->capture_default_str();
  app.add_option("--frames", frames, "frames per sample")->capture_default_str();
  app.add_option("--stage", stage, "ZeRO stage (0, 1, 2, 3)")->capture_default_str();
  app.add_option("--lr", lr, "AdamW learning rate")->capture_default_str();
  app.add_option("--precision", precision, "fp32 | bf16")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  try {
    zest::WorldGuard world;  // MPI under mpirun; a single process otherwise
    auto comm = zest::world_communicator();
    const bool is_rank0 = comm->rank() == 0;

    torch::manual_seed(0);  // every rank builds the same model; the engine broadcasts rank 0's anyway
    zest::ModelSelection selection;
    selection.name = model_name;
    auto model = zest::build_model(zest::resolve_model(selection));
    auto hy = std::dynamic_pointer_cast<zest::hymotion::HyMotionModel>(model);
    ZEST_CHECK(hy != nullptr, "--model ", model_name, " is not a HY-Motion configuration");

    zest::EngineConfig engine_cfg;
    engine_cfg.stage = stage;
    engine_cfg.precision = precision == "bf16" ? zest::Precision::bf16 : zest::Precision::fp32;
    engine_cfg.accumulation_steps = micro_batches;
    engine_cfg.clip_norm = 1.0;
    zest::OptimConfig optim_cfg;  // AdamW, betas (0.9, 0.999), weight decay 0.01
    optim_cfg.lr = lr;
    zest::SchedulerConfig schedule;  // constant: this loop is short
    zest::Engine engine(model, engine_cfg, optim_cfg, schedule, comm);
    const auto dtype = hy->parameters().front().scalar_type();
    if (is_rank0)
      std::printf("%s: %lld parameters, %d ranks, stage %d, %d x %d samples per rank per step\n",
                  model_name.c_str(), static_cast<long long>(engine.num_parameters()), comm->size(), stage,
                  micro_batches, batch);

    auto noise_gen = generator(1000 + comm->rank());  // flow times and noise differ per rank
    for (int step = 0; step < steps; ++step) {
      double loss_sum = 0.0;
      for (int m = 0; m < micro_batches; ++m) {
        // Each rank draws its own slice of the global batch.
        const uint64_t seed = (static_cast<uint64_t>(step) * micro_batches + m) * comm->size() + comm->rank();
        const Batch b = to_dtype(synthetic_batch(hy->config(), batch, frames, 8, seed), dtype);
        const auto loss = zest::hymotion::flow_matching_loss(*hy, b.x1, b.ctxt, b.vtxt, b.x_mask,
                                                             b.ctxt_mask, noise_gen);
        engine.backward(loss);
        loss_sum += loss.item<double>();
      }
      // The logged loss is the mean over every rank's micro-batches.
      auto loss_avg = torch::tensor({loss_sum / micro_batches}, torch::kFloat64);
      comm->allreduce_sync(loss_avg, zest::ReduceOp::sum);
      engine.step();
      const zest::StepStats stats = engine.read_stats();
      if (is_rank0)
        std::printf("step %3lld  loss %.5f  lr %.2e  grad_norm %.4f%s\n", static_cast<long long>(stats.step),
                    loss_avg.item<double>() / comm->size(), stats.lr, stats.grad_norm,
                    stats.skipped ? "  (skipped)" : "");
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "custom_loop: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
