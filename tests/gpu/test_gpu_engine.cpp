// The engine on GPUs (ctest label `gpu`, run on the GPU machine only): stages 0–3 on N GPUs equal plain
// LibTorch on one process within fp32 tolerance (with accumulation and clipping), the fused CUDA
// optimizer equals the CPU path, bf16 tracks fp32, the fp16 scaler skips and grows on the device, and a
// steady-state step never synchronizes the host with the device.
#include "comm/world.h"
#include "engine/engine.h"
#include "profiling/device_memory.h"
#include "../engine/toy_models.h"

#include <ATen/Context.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <gtest/gtest.h>

#include <map>
#include <set>

namespace zest::testing {
namespace {

constexpr int64_t kGlobalBatch = 12;
constexpr int kSteps = 12;

OptimConfig sgd(double lr) {
  OptimConfig c;
  c.name = OptimizerKind::sgd;
  c.lr = lr;
  c.weight_decay = 0.1;
  c.momentum = 0.9;
  return c;
}

OptimConfig adamw() {
  OptimConfig c;
  c.lr = 3e-3;
  c.weight_decay = 0.1;
  return c;
}

struct GpuCase {
  int stage;
  int accumulation;
  double clip;
  bool is_sgd;
  CheckpointPolicy activation_checkpointing = CheckpointPolicy::none;
  double bucket_mb = 25.0;
  bool offload = false;  // [engine.offload] optimizer = "cpu"
  double staging_mb = 256.0;  // [engine.offload] staging_mb
  bool in_backward = false;  // [engine] optimizer_in_backward
};

std::string name_of(const GpuCase& c) {
  return std::string(c.is_sgd ? "sgd" : "adamw") + "_stage" + std::to_string(c.stage) + "_acc" +
         std::to_string(c.accumulation) + (c.clip > 0 ? "_clip" : "_noclip") +
         (c.activation_checkpointing == CheckpointPolicy::all ? "_ac" : "") + (c.bucket_mb < 1 ? "_unitbuckets" : "") + (c.offload ? "_offload" : "") +
         (c.staging_mb < 1 ? "_smallstaging" : "") + (c.in_backward ? "_inbackward" : "");
}

// Trains ToyNet for kSteps on `device` (each rank its slice of the global batch); returns parameters.
std::map<std::string, torch::Tensor> train(const GpuCase& c, DeviceKind device, Precision precision,
                                           std::vector<double>* norms = nullptr) {
  auto comm = world_communicator();
  auto model = std::make_shared<ToyNet>(7);
  EngineConfig ec;
  ec.device = device;
  ec.stage = c.stage;
  ec.precision = precision;
  ec.reduce_dtype = Precision::fp32;
  ec.accumulation_steps = c.accumulation;
  ec.clip_norm = c.clip;
  ec.activation_checkpointing = c.activation_checkpointing;
  ec.bucket_mb = c.bucket_mb;
  ec.offload_optimizer = c.offload ? OffloadTarget::cpu : OffloadTarget::none;
  ec.offload_staging_mb = c.staging_mb;
  ec.optimizer_in_backward = c.in_backward;
  Engine engine(model, ec, c.is_sgd ? sgd(0.01) : adamw(), SchedulerConfig{}, comm);
  const int64_t local = kGlobalBatch / comm->size();
  const int64_t micro = local / c.accumulation;
  for (int step = 0; step < kSteps; ++step) {
    auto [x, y] = toy_batch(step, kGlobalBatch);
    x = x.narrow(0, comm->rank() * local, local).to(engine.device());
    y = y.narrow(0, comm->rank() * local, local).to(engine.device());
    for (int m = 0; m < c.accumulation; ++m) {
      engine.backward(torch::mse_loss(model->forward(x.narrow(0, m * micro, micro)).to(torch::kFloat32),
                                      y.narrow(0, m * micro, micro)));
    }
    engine.step();
    if (norms) norms->push_back(engine.read_stats().grad_norm);
  }
  engine.gather_all_params();
  std::map<std::string, torch::Tensor> out;
  for (const auto& item : model->named_parameters()) out[item.key()] = item.value().detach().to(torch::kCPU, torch::kFloat32);
  return out;
}

// The same training with LibTorch's own optimizer on the full batch, on the CPU.
std::map<std::string, torch::Tensor> reference(const GpuCase& c) {
  auto model = std::make_shared<ToyNet>(7);
  const OptimConfig cfg = c.is_sgd ? sgd(0.01) : adamw();
  std::vector<torch::Tensor> decay, no_decay, unique;
  std::set<const void*> seen;
  for (const auto& item : model->named_parameters()) {
    if (!seen.insert(item.value().unsafeGetTensorImpl()).second) continue;
    (no_decay_matches(cfg.no_decay, item.key()) ? no_decay : decay).push_back(item.value());
    unique.push_back(item.value());
  }
  std::vector<torch::optim::OptimizerParamGroup> groups;
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  if (c.is_sgd) {
    auto options = torch::optim::SGDOptions(cfg.lr).momentum(cfg.momentum);
    groups.emplace_back(decay, std::make_unique<torch::optim::SGDOptions>(torch::optim::SGDOptions(options).weight_decay(cfg.weight_decay)));
    groups.emplace_back(no_decay, std::make_unique<torch::optim::SGDOptions>(torch::optim::SGDOptions(options).weight_decay(0.0)));
    optimizer = std::make_unique<torch::optim::SGD>(groups, options);
  } else {
    auto options = torch::optim::AdamWOptions(cfg.lr).betas({cfg.beta1, cfg.beta2}).eps(cfg.eps);
    groups.emplace_back(decay, std::make_unique<torch::optim::AdamWOptions>(torch::optim::AdamWOptions(options).weight_decay(cfg.weight_decay)));
    groups.emplace_back(no_decay, std::make_unique<torch::optim::AdamWOptions>(torch::optim::AdamWOptions(options).weight_decay(0.0)));
    optimizer = std::make_unique<torch::optim::AdamW>(groups, options);
  }
  for (int step = 0; step < kSteps; ++step) {
    optimizer->zero_grad();
    auto [x, y] = toy_batch(step, kGlobalBatch);
    torch::mse_loss(model->forward(x), y).backward();
    if (c.clip > 0) torch::nn::utils::clip_grad_norm_(unique, c.clip);
    optimizer->step();
  }
  std::map<std::string, torch::Tensor> out;
  for (const auto& item : model->named_parameters()) out[item.key()] = item.value().detach().clone();
  return out;
}

double worst_relative(const std::map<std::string, torch::Tensor>& a, const std::map<std::string, torch::Tensor>& b) {
  double worst = 0.0;
  for (const auto& [name, ref] : b) {
    const double scale = std::max(ref.abs().max().item<double>(), 1e-3);
    worst = std::max(worst, (a.at(name) - ref).abs().max().item<double>() / scale);
  }
  return worst;
}

class DistGpuEquivalence : public ::testing::TestWithParam<GpuCase> {};

// fp32 on the GPU (cuBLAS without TF32, the reduction order of NCCL) against the CPU reference.
TEST_P(DistGpuEquivalence, MatchesLibTorchOnOneProcess) {
  const GpuCase c = GetParam();
  const auto gpu = train(c, DeviceKind::cuda, Precision::fp32);
  EXPECT_LE(worst_relative(gpu, reference(c)), 1e-4) << name_of(c);
}

std::vector<GpuCase> gpu_cases() {
  std::vector<GpuCase> cases;
  for (int stage : {0, 1, 2, 3}) {
    cases.push_back({stage, 1, 0.0, true});
    cases.push_back({stage, 3, 10.0, true, CheckpointPolicy::none, 1e-6});
    cases.push_back({stage, 3, 0.05, false});
    cases.push_back({stage, 1, 0.0, true, CheckpointPolicy::all, 1e-6});
    // Updates during backward, on their own stream: a bucket per unit, with accumulation and recompute.
    GpuCase in_backward{stage, 3, 0.0, false, CheckpointPolicy::none, 1e-6};
    in_backward.in_backward = true;
    cases.push_back(in_backward);
    in_backward = {stage, 1, 0.0, true, CheckpointPolicy::all, 1e-6};
    in_backward.in_backward = true;
    cases.push_back(in_backward);
    if (stage == 0) continue;
    // Optimizer offload: the pieces' downloads, host update and uploads, with accumulation; a ring of
    // 4 × 32 elements makes every unit many pieces and reuses each slot many times a step, so an upload
    // or download raced by the host would show.
    cases.push_back({stage, 3, 0.05, false, CheckpointPolicy::none, 1e-6, /*offload=*/true});
    cases.push_back({stage, 1, 0.0, true, CheckpointPolicy::all, 1e-6, /*offload=*/true});
    cases.push_back({stage, 3, 0.05, false, CheckpointPolicy::none, 1e-6, /*offload=*/true, 1024.0 / (1 << 20)});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Stages, DistGpuEquivalence, ::testing::ValuesIn(gpu_cases()),
                         [](const ::testing::TestParamInfo<GpuCase>& info) { return name_of(info.param); });

// The fused CUDA optimizer and the CPU path compute the same update (fp32 rounding apart).
TEST(DistGpuFusedOptimizer, EqualsTheCpuPath) {
  for (bool is_sgd : {false, true}) {
    const GpuCase c{2, 1, 0.0, is_sgd};
    std::vector<double> gpu_norms, cpu_norms;
    const auto gpu = train(c, DeviceKind::cuda, Precision::fp32, &gpu_norms);
    const auto cpu = train(c, DeviceKind::cpu, Precision::fp32, &cpu_norms);
    EXPECT_LE(worst_relative(gpu, cpu), 1e-5) << (is_sgd ? "sgd" : "adamw");
    for (size_t i = 0; i < gpu_norms.size(); ++i) EXPECT_NEAR(gpu_norms[i], cpu_norms[i], 1e-5 * cpu_norms[i]);
  }
}

// Offloaded (host AdamW over the master in host memory, bf16 parameters uploaded through the staging
// ring) equals the on-device optimizer.
TEST(DistGpuOffload, Bf16EqualsTheDeviceOptimizer) {
  for (int stage : {1, 2, 3}) {
    const GpuCase on_device{stage, 3, 0.05, false};
    GpuCase offloaded = on_device;
    offloaded.offload = true;
    const auto a = train(on_device, DeviceKind::cuda, Precision::bf16);
    const auto b = train(offloaded, DeviceKind::cuda, Precision::bf16);
    EXPECT_LT(worst_relative(b, a), 1e-2) << "stage " << stage;  // bf16 rounding of the same fp32 updates
  }
}

TEST(DistGpuBf16, TracksFp32) {
  for (int stage : {0, 2, 3}) {
    const GpuCase c{stage, 3, 0.0, true};
    const auto fp32 = train(c, DeviceKind::cuda, Precision::fp32);
    const auto bf16 = train(c, DeviceKind::cuda, Precision::bf16);
    EXPECT_LT(worst_relative(bf16, fp32), 3e-2) << "stage " << stage;
  }
}

TEST(DistGpuFp16, OverflowSkipsEverywhereAndTheScaleRecovers) {
  auto comm = world_communicator();
  auto model = std::make_shared<ToyNet>(3);
  EngineConfig ec;
  ec.device = DeviceKind::cuda;
  ec.stage = 2;
  ec.precision = Precision::fp16;
  ec.loss_scale.initial = 1024;
  ec.loss_scale.window = 3;
  Engine engine(model, ec, sgd(0.01), SchedulerConfig{}, comm);
  auto [x, y] = toy_batch(0, 8);
  x = x.to(engine.device());
  y = y.to(engine.device());
  auto loss_for = [&](bool poison) {
    auto loss = torch::mse_loss(model->forward(x).to(torch::kFloat32), y);
    return poison ? loss * 1e30 : loss;
  };
  engine.backward(loss_for(false));
  engine.step();
  engine.backward(loss_for(comm->rank() == comm->size() - 1));
  engine.step();
  const auto stats = engine.read_stats();
  EXPECT_TRUE(stats.skipped);
  EXPECT_EQ(stats.applied_steps, 1);
  EXPECT_DOUBLE_EQ(engine.loss_scaler().scale(), 512);
  for (int i = 0; i < 3; ++i) {
    engine.backward(loss_for(false));
    engine.step();
  }
  EXPECT_FALSE(engine.read_stats().skipped);
  EXPECT_DOUBLE_EQ(engine.loss_scaler().scale(), 1024);
}

// No host synchronization in a steady-state step: with LibTorch's sync debug mode set to error, any
// synchronizing call (.item(), a copy to the host, a stream or device synchronize) throws. Stages 2
// and 3, fp16 with loss scaling, clipping and accumulation, 10 steps; read_stats() afterwards only.
TEST(DistGpuNoHostSync, TenStepsWithoutASingleSync) {
  for (int stage : {2, 3}) {
    auto comm = world_communicator();
    auto model = std::make_shared<ToyNet>(5);
    EngineConfig ec;
    ec.device = DeviceKind::cuda;
    ec.stage = stage;
    ec.precision = Precision::fp16;
    ec.clip_norm = 1.0;
    ec.accumulation_steps = 2;
    ec.bucket_mb = 1e-6;
    Engine engine(model, ec, adamw(), SchedulerConfig{}, comm);
    auto [x, y] = toy_batch(0, 16);
    x = x.to(engine.device());
    y = y.to(engine.device());
    auto step = [&] {
      for (int m = 0; m < 2; ++m) engine.backward(torch::mse_loss(model->forward(x).to(torch::kFloat32), y));
      engine.step();
    };
    step();  // first step: lazy allocations (allocator, pinned host buffers, cuBLAS handles)
    c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_ERROR);
    try {
      for (int i = 0; i < 10; ++i) step();
    } catch (const std::exception& e) {
      c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_DISABLED);
      FAIL() << "stage " << stage << ": a step synchronized with the device: " << e.what();
    }
    c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_DISABLED);
    EXPECT_EQ(engine.read_stats().step, 11);
  }
}

int64_t allocated_bytes() {
  return c10::cuda::CUDACachingAllocator::getDeviceStats(c10::cuda::current_device()).allocated_bytes[0].current;
}

// Full gradients (stages 0–1, stage 2 on one rank) have memory only from a unit's first gradient of a step
// to the optimizer's update: after backward they are all there, after step() none is, with and without
// accumulation — so the next forward's activations can use that memory, as the peer's do.
TEST(GpuPerStepGrads, FullGradientsExistOnlyWithinAStep) {
  auto comm = world_communicator();
  for (int stage : {0, 1, 2}) {
    if (stage == 2 && comm->size() > 1) continue;  // stage 2 on N ranks keeps a persistent shard
    for (int accumulation : {1, 2}) {
      auto model = std::make_shared<ToyNet>(5);
      EngineConfig ec;
      ec.device = DeviceKind::cuda;
      ec.stage = stage;
      ec.precision = Precision::bf16;
      ec.accumulation_steps = accumulation;
      ec.bucket_mb = 1e-6;
      Engine engine(model, ec, adamw(), SchedulerConfig{}, comm);
      const int64_t grads = engine.model_state_bytes().grads;
      ASSERT_GT(grads, 0);
      auto [x, y] = toy_batch(0, 16);
      x = x.to(engine.device());
      y = y.to(engine.device());
      auto step = [&](int64_t at_rest) {
        for (int m = 0; m < accumulation; ++m) {
          engine.backward(torch::mse_loss(model->forward(x).to(torch::kFloat32), y));
          EXPECT_GE(allocated_bytes(), at_rest + grads) << "stage " << stage << ": every unit's gradients exist";
          EXPECT_TRUE(model->lin[0]->weight.grad().defined());
        }
        engine.step();
        EXPECT_FALSE(model->lin[0]->weight.grad().defined());
      };
      step(0);  // the first step's lazy allocations (cuBLAS workspace, step scalars' copies) stay
      const int64_t at_rest = allocated_bytes();
      for (int i = 0; i < 3; ++i) {
        step(at_rest);
        EXPECT_LT(allocated_bytes(), at_rest + grads)
            << "stage " << stage << ": gradients kept " << allocated_bytes() - at_rest << " bytes past the step";
      }
      EXPECT_EQ(engine.read_stats().step, 4);
    }
  }
}

// [engine] optimizer_in_backward: each bucket's gradients go as soon as its update on the update stream is
// done, so after backward none is left (allocated bytes back near rest) and step() frees nothing more.
TEST(GpuPerStepGrads, UpdatesInBackwardLeaveNoGradientsAfterBackward) {
  auto comm = world_communicator();
  for (int stage : {0, 1, 2}) {
    if (stage == 2 && comm->size() > 1) continue;  // stage 2 on N ranks keeps a persistent shard
    auto model = std::make_shared<ToyNet>(5);
    EngineConfig ec;
    ec.device = DeviceKind::cuda;
    ec.stage = stage;
    ec.precision = Precision::bf16;
    ec.bucket_mb = 1e-6;
    ec.optimizer_in_backward = true;
    Engine engine(model, ec, adamw(), SchedulerConfig{}, comm);
    EXPECT_EQ(engine.model_state_bytes().grads, 0);  // per-step gradients are no model state here
    const int64_t grads = engine.num_parameters() * 4;  // fp32, the reduce dtype
    auto [x, y] = toy_batch(0, 16);
    x = x.to(engine.device());
    y = y.to(engine.device());
    auto step = [&] {
      engine.backward(torch::mse_loss(model->forward(x).to(torch::kFloat32), y));
      EXPECT_FALSE(model->lin[0]->weight.grad().defined()) << "stage " << stage;
      const int64_t after_backward = allocated_bytes();
      engine.step();
      return after_backward;
    };
    step();  // the first step's lazy allocations stay
    const int64_t at_rest = allocated_bytes();
    for (int i = 0; i < 3; ++i) {
      EXPECT_LT(step(), at_rest + grads) << "stage " << stage << ": gradients outlived their bucket's update";
    }
    EXPECT_FALSE(engine.read_stats().skipped);
  }
}

// Four 1024² layers, a unit each: model state large enough for the allocator's rounding not to matter.
class WideNet : public UnitModule {
 public:
  WideNet() {
    for (int i = 0; i < 4; ++i)
      layers.push_back(register_module("l" + std::to_string(i), torch::nn::Linear(torch::nn::LinearOptions(1024, 1024).bias(false))));
  }
  std::vector<UnitDecl> unit_decls() const override {
    std::vector<UnitDecl> decls;
    for (int i = 0; i < 4; ++i) decls.push_back({"l" + std::to_string(i), {"l" + std::to_string(i) + "."}});
    return decls;
  }
  std::vector<torch::nn::Linear> layers;
};

// Building the engine frees the per-step gradients' memory (needed only while their views are made)
// before it allocates the optimizer state, so the build's peak stays below what the engine holds after it
// plus the gradients — with graphs a run's reported peak starts before the build (zest bench), and with
// optimizer_in_backward the gradients never all exist in training.
TEST(GpuPerStepGrads, BuildingNeverHoldsGradientsBesideTheOptimizerState) {
  auto comm = world_communicator();
  if (comm->size() > 1) GTEST_SKIP() << "one rank: stage 2 keeps per-step gradients there";
  auto model = std::make_shared<WideNet>();
  EngineConfig ec;
  ec.device = DeviceKind::cuda;
  ec.stage = 2;
  ec.precision = Precision::bf16;
  const torch::Device device(torch::kCUDA, 0);
  c10::cuda::device_synchronize();
  const int64_t before = allocated_bytes();
  reset_peak_device_memory(device);
  Engine engine(model, ec, adamw(), SchedulerConfig{}, comm);
  const int64_t held = allocated_bytes() - before;  // bf16 parameters, fp32 master, AdamW's two moments
  const int64_t grads = engine.num_parameters() * 4;
  const int64_t peak = device_memory_stats(device).peak_allocated_bytes - before;
  EXPECT_GE(held, engine.num_parameters() * (2 + 4 + 8));
  EXPECT_LT(held, engine.num_parameters() * (2 + 4 + 8) + (1 << 20));  // + step scalars, chunk tables
  EXPECT_LT(peak, held + grads / 2) << "the build held " << peak << " bytes at its peak, " << held << " after it";
}

// engine.cudnn_benchmark is LibTorch's process-wide cuDNN switch, set by the engine on the GPU it drives.
TEST(GpuCudnnBenchmark, TheEngineSetsItFromTheConfig) {
  auto comm = world_communicator();
  for (const bool benchmark : {false, true, false}) {
    EngineConfig ec;
    ec.device = DeviceKind::cuda;
    ec.cudnn_benchmark = benchmark;
    Engine engine(std::make_shared<ToyNet>(3), ec, adamw(), SchedulerConfig{}, comm);
    EXPECT_EQ(at::globalContext().benchmarkCuDNN(), benchmark);
  }
}

}  // namespace
}  // namespace zest::testing
