// Whole steps as CUDA graphs (engine/step_graphs.h; ctest label `gpu`): replayed steps give the
// parameters eager steps give — at stages 0–3, with accumulation, clipping, fp16 loss scaling and an EMA,
// across a change of batch shape and back — the noise generator replays fresh numbers (HY-Motion's
// flow-matching loss), steps with every unit recomputed are captured, and what cannot be captured (a
// recomputed unit drawing random numbers) runs eagerly and says why; with graphs the device reserves no
// more than with eager steps. Under gpu_np2 the same runs on two GPUs (NCCL inside the
// graph).
#include "comm/world.h"
#include "engine/engine.h"
#include "engine/step_graphs.h"
#include "models/model_resolve.h"
#include "../engine/toy_models.h"
#include "common/temp_dir.h"
#include "common/zest_cli_run.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <map>
#include <sstream>
#include <string>

namespace zest::testing {
namespace {

struct GraphCase {
  int stage = 2;
  int accumulation = 1;
  double clip = 0.0;
  Precision precision = Precision::fp32;
  bool ema = false;
  CheckpointPolicy recompute = CheckpointPolicy::none;
  bool in_backward = false;  // [engine] optimizer_in_backward: updates on their own stream inside the graph
};

std::string name_of(const GraphCase& c) {
  return "stage" + std::to_string(c.stage) + "_acc" + std::to_string(c.accumulation) + (c.clip > 0 ? "_clip" : "") +
         "_" + to_string(c.precision) + (c.ema ? "_ema" : "") + (c.recompute == CheckpointPolicy::all ? "_recomputed" : "") +
         (c.in_backward ? "_inbackward" : "");
}

OptimConfig adamw() {
  OptimConfig c;
  c.lr = 3e-3;
  c.weight_decay = 0.1;
  return c;
}

EngineConfig engine_config(const GraphCase& c, CudaGraphs graphs) {
  EngineConfig ec;
  ec.device = DeviceKind::cuda;
  ec.stage = c.stage;
  ec.precision = c.precision;
  ec.accumulation_steps = c.accumulation;
  ec.clip_norm = c.clip;
  ec.bucket_mb = 1e-6;  // a bucket per unit: several collectives inside the graph
  ec.cuda_graphs = graphs;
  ec.activation_checkpointing = c.recompute;
  ec.optimizer_in_backward = c.in_backward;
  return ec;
}

// The batch sizes of the steps: a shape change after its capture and back (8 is captured at step 3,
// 4 at step 7, then 8 replays again).
constexpr int64_t kBatches[] = {8, 8, 8, 8, 4, 4, 4, 4, 8, 8};

struct Trained {
  std::map<std::string, torch::Tensor> params;
  torch::Tensor ema;
  std::vector<double> losses;
  int64_t captures = 0, replays = 0;
};

Trained train_toy(const GraphCase& c, CudaGraphs graphs_mode) {
  auto comm = world_communicator();
  auto model = std::make_shared<ToyNet>(3);
  Engine engine(model, engine_config(c, graphs_mode), adamw(), SchedulerConfig{}, comm);
  if (c.ema) {
    EmaConfig ema;
    ema.enabled = true;
    engine.enable_ema(ema);
  }
  StepGraphs graphs(engine, {});
  Trained out;
  for (size_t step = 0; step < std::size(kBatches); ++step) {
    const int64_t batch = kBatches[step];
    auto [x, y] = toy_batch(static_cast<int>(step), batch * c.accumulation * comm->size());
    const int64_t local = batch * c.accumulation;
    x = x.narrow(0, comm->rank() * local, local).to(engine.device());
    y = y.narrow(0, comm->rank() * local, local).to(engine.device());
    std::vector<StepGraphs::Inputs> micro;
    for (int m = 0; m < c.accumulation; ++m)
      micro.push_back({{"x", x.narrow(0, m * batch, batch)}, {"y", y.narrow(0, m * batch, batch)}});
    const auto losses = graphs.step(micro, [&](const StepGraphs::Inputs& in, int) {
      return torch::mse_loss(model->forward(in.at("x")).to(torch::kFloat32), in.at("y"));
    });
    out.losses.push_back(losses.sum().item<double>());
  }
  EXPECT_EQ(engine.read_stats().step, static_cast<int64_t>(std::size(kBatches)));
  engine.gather_all_params();
  for (const auto& item : model->named_parameters())
    out.params[item.key()] = item.value().detach().to(torch::kCPU, torch::kFloat32);
  if (c.ema) out.ema = engine.ema()->shard().to(torch::kCPU);
  out.captures = graphs.captures();
  out.replays = graphs.replays();
  return out;
}

class GpuStepGraphs : public ::testing::TestWithParam<GraphCase> {};

TEST_P(GpuStepGraphs, ReplayedStepsEqualEagerSteps) {
  const GraphCase c = GetParam();
  const Trained eager = train_toy(c, CudaGraphs::off);
  const Trained graphed = train_toy(c, CudaGraphs::auto_);
  EXPECT_EQ(eager.captures, 0);
  EXPECT_EQ(graphed.captures, 2);  // batch 8 and batch 4
  EXPECT_EQ(graphed.replays, 6);   // steps 3, 4, 7, 8, 9, 10
  bool bitwise = true;
  for (const auto& [name, value] : eager.params) {
    const auto& other = graphed.params.at(name);
    bitwise = bitwise && torch::equal(value, other);
    const double scale = std::max(value.abs().max().item<double>(), 1e-3);
    EXPECT_LE((value - other).abs().max().item<double>() / scale, 1e-5) << name_of(c) << " " << name;
  }
  for (size_t i = 0; i < eager.losses.size(); ++i)
    EXPECT_NEAR(eager.losses[i], graphed.losses[i], 1e-5 * std::max(1.0, std::abs(eager.losses[i]))) << "step " << i + 1;
  if (c.ema) EXPECT_LE((eager.ema - graphed.ema).abs().max().item<double>(), 1e-5);
  std::cout << name_of(c) << ": replayed parameters " << (bitwise ? "bitwise equal" : "within 1e-5") << " to eager\n";
}

INSTANTIATE_TEST_SUITE_P(Cases, GpuStepGraphs,
                         ::testing::Values(GraphCase{0, 1}, GraphCase{1, 2, 1.0}, GraphCase{2, 1},
                                           GraphCase{2, 2, 0.5, Precision::fp32, true}, GraphCase{3, 1},
                                           GraphCase{3, 2, 1.0}, GraphCase{2, 2, 1.0, Precision::fp16},
                                           GraphCase{2, 1, 0.0, Precision::bf16, true},
                                           // Every unit recomputed: no unit draws random numbers, so captured.
                                           GraphCase{2, 1, 0.0, Precision::fp32, false, CheckpointPolicy::all},
                                           GraphCase{3, 2, 1.0, Precision::fp32, false, CheckpointPolicy::all},
                                           GraphCase{2, 2, 0.0, Precision::bf16, true, CheckpointPolicy::all},
                                           // Updates during backward: the update stream forks and joins
                                           // inside the captured step.
                                           GraphCase{2, 1, 0.0, Precision::fp32, false, CheckpointPolicy::none, true},
                                           GraphCase{3, 2, 0.0, Precision::bf16, true, CheckpointPolicy::all, true},
                                           GraphCase{1, 2, 0.0, Precision::fp32, true, CheckpointPolicy::none, true}),
                         [](const auto& info) { return name_of(info.param); });

// The flow-matching loss draws its noise and times from a generator: each replay must draw fresh
// numbers, the same ones the eager steps draw from the same seed. The batch is prepared as the bench's and the
// loader's are (the tokens packed ahead of the step, the default), so the packed step is what is captured.
TEST(GpuStepGraphs, HyMotionNoiseIsReplayedFresh) {
  ModelSelection selection;
  selection.name = "hymotion_tiny";
  const ResolvedModel resolved = resolve_model(selection);
  auto run = [&](CudaGraphs mode) {
    torch::manual_seed(0);
    auto model = build_model(resolved);
    EngineConfig ec;
    ec.device = DeviceKind::cuda;
    ec.precision = Precision::fp32;
    ec.cuda_graphs = mode;
    Engine engine(model, ec, adamw(), SchedulerConfig{}, world_communicator());
    torch::Generator gen = at::globalContext().defaultGenerator(engine.device()).clone();
    gen.set_current_seed(7);
    auto batch = resolved.family->synthetic_batch(*model, {24, 6}, 2, engine.device(), gen);
    resolved.family->prepare_batch(batch);
    EXPECT_EQ(batch.count("packed_tokens.motion_rows"), 1u);
    StepGraphs graphs(engine, {gen});
    std::vector<double> losses;
    for (int step = 0; step < 6; ++step) {
      losses.push_back(graphs.step({batch}, [&](const StepGraphs::Inputs& in, int) {
                               return resolved.family->training_loss(*model, in, gen);
                             })[0].item<double>());
    }
    EXPECT_EQ(graphs.replays(), mode == CudaGraphs::off ? 0 : 4);
    return losses;
  };
  const auto eager = run(CudaGraphs::off);
  const auto graphed = run(CudaGraphs::auto_);
  for (size_t i = 0; i < eager.size(); ++i) EXPECT_NEAR(eager[i], graphed[i], 1e-5) << "step " << i + 1;
  EXPECT_NE(graphed[3], graphed[4]);  // the same batch, fresh noise each replay
}

// Two units, the first with dropout: checkpointed, its recompute must restore the generators' state on the
// host, which a graph cannot hold.
class DropoutNet : public UnitModule {
 public:
  DropoutNet() {
    torch::manual_seed(3);
    body = register_module("body", torch::nn::Linear(7, 13));
    head = register_module("head", torch::nn::Linear(13, 5));
  }
  std::vector<UnitDecl> unit_decls() const override { return {{"body", {"body."}}, {"head", {"head."}}}; }
  torch::Tensor forward(const torch::Tensor& x) {
    const auto h = run_unit("body", [this](const Tensors& in) {
                     return Tensors{torch::dropout(torch::gelu(body->forward(in[0])), 0.2, is_training())};
                   }, {x})[0];
    return run_unit("head", [this](const Tensors& in) { return Tensors{head->forward(in[0]).sum(-1, true)}; }, {h})[0];
  }
  torch::nn::Linear body{nullptr}, head{nullptr};
};

// Learnt in the warm-up steps: a checkpointed unit that draws random numbers keeps every step eager, and the
// reason names it.
TEST(GpuStepGraphs, AUnitDrawingRandomNumbersRunsEagerlyAndSaysWhy) {
  auto model = std::make_shared<DropoutNet>();
  GraphCase c;
  c.recompute = CheckpointPolicy::all;
  Engine engine(model, engine_config(c, CudaGraphs::auto_), adamw(), SchedulerConfig{}, world_communicator());
  StepGraphs graphs(engine, {});
  EXPECT_TRUE(graphs.is_enabled()) << graphs.disabled_reason();  // nothing known before the first step
  auto [x, y] = toy_batch(0, 8);
  std::vector<double> losses;
  for (int i = 0; i < 5; ++i) {
    losses.push_back(graphs.step({{{"x", x.to(engine.device())}, {"y", y.to(engine.device())}}},
                                 [&](const StepGraphs::Inputs& in, int) {
                                   return torch::mse_loss(model->forward(in.at("x")).to(torch::kFloat32), in.at("y"));
                                 })[0].item<double>());
  }
  EXPECT_FALSE(graphs.is_enabled());
  EXPECT_NE(graphs.disabled_reason().find("unit 'body' draws random numbers"), std::string::npos)
      << graphs.disabled_reason();
  EXPECT_EQ(graphs.captures(), 0);
  EXPECT_EQ(graphs.replays(), 0);
  EXPECT_EQ(engine.read_stats().step, 5);
}

// The last JSON line of one `zest bench` run of HY-Motion at a shape that is not the release, 8 sequences, in a
// process of its own: in this program the tensors earlier tests left alive split the caching allocator's
// segments, which neither an eager nor a graphed run could free (the peaks were 1.2-2.4 GiB above a fresh
// process's).
nlohmann::json bench_in_own_process(const std::string& graphs) {
  const TempDir dir("graph_reserve");
  const std::string args = "bench " + std::string(ZEST_SOURCE_DIR) +
                           "/bench/configs/hymotion_d1024_hd128_l21.toml --steps 3 --warmup 3"
                           " --set data.batch_size=8 --set 'engine.cuda_graphs=\"" + graphs + "\"'";
  const ZestRun run = run_zest(args, dir.sub("bench.log"));
  EXPECT_EQ(run.status, 0) << "zest " << args << "\n" << run.output;
  std::istringstream lines(run.output);
  std::string line, json_line;
  while (std::getline(lines, line))
    if (!line.empty() && line.front() == '{') json_line = line;
  EXPECT_FALSE(json_line.empty()) << "zest " << args << "\n" << run.output;
  return json_line.empty() ? nlohmann::json{} : nlohmann::json::parse(json_line);
}

// With graphs the device reserves what the eager steps reserve. The engine's construction-time gradients,
// freed on the caller's stream before the first step, stayed cached for that stream beside the step stream's
// own cache (the fp32 gradients' size more: 2.0 GiB here, 3.9 GiB at the 1B release) until StepGraphs released
// them.
TEST(GpuStepGraphs, GraphsReserveNoMoreThanEagerSteps) {
  if (world_communicator()->size() > 1) GTEST_SKIP() << "one process's bench; the ranks would each start one";
  const nlohmann::json eager = bench_in_own_process("off");
  const nlohmann::json graphed = bench_in_own_process("auto");
  ASSERT_TRUE(eager.contains("peak_reserved_gib") && graphed.contains("peak_reserved_gib"));
  std::cout << "graphs off: reserved " << eager["peak_reserved_gib"] << " GiB; graphs auto: reserved "
            << graphed["peak_reserved_gib"] << " GiB, the graphs' pool " << graphed["graph_pool_gib"]
            << " GiB, the eager steps' cache " << graphed["eager_cache_gib"] << " GiB\n";
  EXPECT_GT(graphed["graph_pool_gib"].get<double>(), 1.0);  // the activations of 8 sequences: the steps were graphed
  EXPECT_LE(graphed["peak_reserved_gib"].get<double>(), eager["peak_reserved_gib"].get<double>() + 0.3);
}

}  // namespace
}  // namespace zest::testing
