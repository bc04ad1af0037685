// Model-state accounting held to the ZeRO formulas, the collectives each micro-step issues (stages 0/1
// stay silent on non-boundary micro-steps; stages 2/3 reduce-scatter every micro-step; stage 3 gathers per
// bucket), the grouped collectives every backend provides, and what the engine refuses.
#include "engine/bucket_plan.h"
#include "engine/engine.h"
#include "engine/memory_model.h"
#include "comm/world.h"
#include "cpu_engine_config.h"
#include "toy_models.h"

#include <gtest/gtest.h>

namespace zest::testing {
namespace {

// Four bias-free 64×64 linears: P = 16384 with no padding for N ∈ {1, 2, 4}.
class SquareNet : public UnitModule {
 public:
  SquareNet() {
    for (int i = 0; i < 4; ++i) layers.push_back(register_module("l" + std::to_string(i),
        torch::nn::Linear(torch::nn::LinearOptions(64, 64).bias(false))));
  }
  std::vector<UnitDecl> unit_decls() const override {
    return {{"l0", {"l0."}}, {"l1", {"l1."}}, {"l2", {"l2."}}, {"l3", {"l3."}}};
  }
  torch::Tensor forward(torch::Tensor x) {
    x = x.to(layers[0]->weight.scalar_type());
    for (size_t i = 0; i < layers.size(); ++i) {
      x = run_unit("l" + std::to_string(i), [&, i](const Tensors& in) { return Tensors{layers[i]->forward(in[0])}; }, {x})[0];
    }
    return x;
  }
  std::vector<torch::nn::Linear> layers;
};

TEST(MemoryModel, ZeroPaperFigures) {
  // 7.5B parameters, 64 GPUs, mixed-precision Adam: the paper's 120 / 31.4 / 16.6 / 1.9 GB. Stage 3 keeps
  // no 16-bit parameters at rest (its gathers cast the master, as FSDP2's do): 14P/N = 1.64 GB, and the
  // paper's 16P/N only with optimizer offload, whose device keeps the 16-bit slice the host updates.
  const double expected[] = {120.0, 31.4, 16.6, 1.64};
  for (int stage = 0; stage <= 3; ++stage) {
    MemoryModelInputs in{7'500'000'000, 64, stage, Precision::bf16, Precision::bf16, 8};
    const double gb = estimate_model_state_bytes(in).total() / 1e9;
    EXPECT_NEAR(gb, expected[stage], stage == 3 ? 0.005 : 0.05) << "stage " << stage;  // the paper rounds
  }
  MemoryModelInputs offloaded{7'500'000'000, 64, 3, Precision::bf16, Precision::bf16, 8, false, true};
  EXPECT_NEAR(estimate_model_state_bytes(offloaded).params / 1e9, 2 * 7.5 / 64, 0.005);
  EXPECT_NEAR(estimate_model_state_bytes(offloaded).on_device() / 1e9, 4 * 7.5 / 64, 0.005);
}

TEST(DistMemory, EngineBuffersMatchTheFormula) {
  auto comm = world_communicator();
  for (int stage : {0, 1, 2, 3}) {
    for (Precision reduce : {Precision::bf16, Precision::fp32}) {
      auto model = std::make_shared<SquareNet>();
      Engine engine(model, cpu_config(stage, Precision::bf16, reduce), OptimConfig{}, SchedulerConfig{}, comm);
      const auto actual = engine.model_state_bytes();
      const auto formula = estimate_model_state_bytes({engine.num_parameters(), comm->size(), stage,
                                                       Precision::bf16, reduce, 8});
      EXPECT_EQ(engine.num_parameters(), 16384);
      EXPECT_EQ(actual.params, formula.params) << "stage " << stage;
      EXPECT_EQ(actual.grads, formula.grads) << "stage " << stage;
      EXPECT_EQ(actual.master, formula.master) << "stage " << stage;
      EXPECT_EQ(actual.optimizer, formula.optimizer) << "stage " << stage;
      if (reduce == Precision::bf16) {
        const int64_t P = 16384, N = comm->size();
        const int64_t paper[] = {16 * P, 4 * P + 12 * P / N, 2 * P + 14 * P / N, 14 * P / N};
        EXPECT_EQ(actual.total(), paper[stage]) << "stage " << stage;
      }
    }
  }
}

// engine.reduce_dtype holds at every stage: gradients accumulate and travel in it.
TEST(DistMemory, ReduceDtypeIsTheGradientDtypeAtEveryStage) {
  auto comm = world_communicator();
  for (int stage : {0, 1, 2, 3}) {
    for (Precision reduce : {Precision::bf16, Precision::fp32}) {
      auto model = std::make_shared<SquareNet>();
      Engine engine(model, cpu_config(stage, Precision::bf16, reduce), OptimConfig{}, SchedulerConfig{}, comm);
      engine.backward(model->forward(torch::randn({4, 64})).to(torch::kFloat32).pow(2).mean());
      const auto& grads = engine.optimizer().segments().front().grad;
      EXPECT_EQ(grads.scalar_type(), to_dtype(reduce)) << "stage " << stage;
      engine.step();
    }
  }
}

// bucket_mb counts gradient bytes in the reduce dtype: the same limit fuses twice as many bf16 units.
TEST(DistMemory, BucketSizeCountsReduceDtypeBytes) {
  auto comm = world_communicator();
  const int64_t unit_fp32_bytes = 64 * 64 * 4;  // 16 KiB
  EngineConfig ec = cpu_config(2, Precision::bf16, Precision::fp32);
  ec.bucket_mb = 2.0 * unit_fp32_bytes / (1024.0 * 1024.0);
  Engine fp32(std::make_shared<SquareNet>(), ec, OptimConfig{}, SchedulerConfig{}, comm);
  ec.reduce_dtype = Precision::bf16;
  Engine bf16(std::make_shared<SquareNet>(), ec, OptimConfig{}, SchedulerConfig{}, comm);
  EXPECT_EQ(fp32.buckets().size(), 2u);
  EXPECT_EQ(bf16.buckets().size(), 1u);
}

// Eight 64×64 units, one per bucket.
class DeepNet : public UnitModule {
 public:
  DeepNet() {
    for (int i = 0; i < 8; ++i) layers.push_back(register_module("l" + std::to_string(i),
        torch::nn::Linear(torch::nn::LinearOptions(64, 64).bias(false))));
  }
  std::vector<UnitDecl> unit_decls() const override {
    std::vector<UnitDecl> decls;
    for (int i = 0; i < 8; ++i) decls.push_back({"l" + std::to_string(i), {"l" + std::to_string(i) + "."}});
    return decls;
  }
  torch::Tensor forward(torch::Tensor x) {
    x = x.to(layers[0]->weight.scalar_type());
    for (size_t i = 0; i < layers.size(); ++i) {
      x = run_unit("l" + std::to_string(i), [&, i](const Tensors& in) { return Tensors{torch::tanh(layers[i]->forward(in[0]))}; }, {x})[0];
    }
    return x;
  }
  std::vector<torch::nn::Linear> layers;
};

// Stage 2 holds a bucket's full gradients only until its reduction is done, a few buckets at a time:
// its gradient peak stays well below stage 1's persistent full buffer.
TEST(DistMemory, Stage2GradientPeakIsBelowStage1) {
  auto comm = world_communicator();
  int64_t peak[3] = {0, 0, 0};
  for (int stage : {1, 2}) {
    auto model = std::make_shared<DeepNet>();
    EngineConfig ec = cpu_config(stage, Precision::fp32, Precision::fp32);
    ec.bucket_mb = 0.01;  // one 16 KiB unit per bucket
    Engine engine(model, ec, OptimConfig{}, SchedulerConfig{}, comm);
    for (int step = 0; step < 2; ++step) {
      engine.backward(model->forward(torch::randn({4, 64})).pow(2).mean());
      engine.step();
    }
    peak[stage] = engine.model_state_bytes().grads + engine.peak_transient_grad_bytes();
  }
  const int64_t unit_bytes = 64 * 64 * 4;
  EXPECT_EQ(peak[1], 8 * unit_bytes);                 // the full buffer, always
  EXPECT_LE(peak[2], 8 * unit_bytes / comm->size() + 3 * unit_bytes);  // the shard + at most 3 in flight
  if (comm->size() >= 2) {
    EXPECT_LT(peak[2], peak[1]);  // (one rank's shard is the whole model)
  }
}

// Full gradients (stages 0–1, stage 2 on one rank) live per step: after backward every parameter's .grad
// is a slot of the engine's buffer; after step() none is defined and the buffer's memory is gone (on the GPU
// tests/gpu/test_gpu_engine.cpp measures the bytes). Accumulated micro-steps keep theirs until the step.
TEST(DistMemory, FullGradientsAreReleasedAfterEachStep) {
  auto comm = world_communicator();
  for (int stage : {0, 1, 2}) {
    for (int accumulation : {1, 3}) {
      auto model = std::make_shared<DeepNet>();
      EngineConfig ec = cpu_config(stage, Precision::fp32, Precision::fp32);
      ec.accumulation_steps = accumulation;
      ec.bucket_mb = 0.01;
      Engine engine(model, ec, OptimConfig{}, SchedulerConfig{}, comm);
      const bool per_step = stage < 2 || comm->size() == 1;
      for (int step = 0; step < 2; ++step) {
        for (int m = 0; m < accumulation; ++m) {
          engine.backward(model->forward(torch::randn({4, 64})).pow(2).mean());
          for (const auto& layer : model->layers) {
            if (!per_step) continue;  // stage 2 on N ranks: reduced into the shard, .grad dropped
            ASSERT_TRUE(layer->weight.grad().defined()) << "stage " << stage << ", micro-step " << m;
            EXPECT_GT(layer->weight.grad().abs().sum().item<double>(), 0.0);
          }
        }
        engine.step();
        for (const auto& layer : model->layers) {
          EXPECT_FALSE(layer->weight.grad().defined()) << "stage " << stage << ": a gradient outlived the step";
        }
      }
    }
  }
}

// [engine] optimizer_in_backward: a bucket's gradients are released in the backward once it is updated,
// so while the first layer's gradient arrives (the backward's end) at most the two buckets after it still
// hold theirs — where without it every layer does — and the parameters already moved before step().
TEST(DistMemory, UpdatesInBackwardReleaseGradientsAsTheyGo) {
  auto comm = world_communicator();
  for (int stage : {0, 1, 2, 3}) {
    for (bool in_backward : {false, true}) {
      auto model = std::make_shared<DeepNet>();
      EngineConfig ec = cpu_config(stage, Precision::fp32, Precision::fp32);
      ec.bucket_mb = 0.01;  // one layer per bucket
      ec.optimizer_in_backward = in_backward;
      Engine engine(model, ec, OptimConfig{}, SchedulerConfig{}, comm);
      const bool per_step = stage < 2 || comm->size() == 1;
      int held_at_first = -1;
      model->layers[0]->weight.register_hook([&](const torch::Tensor& grad) {
        held_at_first = 0;
        for (const auto& layer : model->layers) held_at_first += layer->weight.grad().defined() ? 1 : 0;
        return grad;
      });
      const bool keeps_params = stage < 3;  // stage 3 frees them after use: the master moves
      const torch::Tensor before = keeps_params ? model->layers[7]->weight.detach().clone() : torch::Tensor();
      engine.backward(model->forward(torch::randn({4, 64})).pow(2).mean());
      ASSERT_GE(held_at_first, 0);
      const std::string what = "stage " + std::to_string(stage) + (in_backward ? ", in backward" : "");
      if (per_step) {
        if (in_backward) {
          EXPECT_LE(held_at_first, 3) << what;  // layers 0 and 1, and at most one awaiting release
        } else {
          EXPECT_EQ(held_at_first, 8) << what;
        }
      }
      if (keeps_params) EXPECT_EQ(!model->layers[7]->weight.detach().equal(before), in_backward) << what;
      if (in_backward) {
        for (const auto& layer : model->layers) EXPECT_FALSE(layer->weight.grad().defined()) << what;
      }
      engine.step();
    }
  }
}

// Stage 3 gathers a bucket before its unit runs and frees it after: never more than the running bucket
// and `prefetch` more are gathered.
TEST(DistMemory, Stage3GathersAtMostPrefetchAhead) {
  auto comm = world_communicator();
  for (int prefetch : {0, 1, 2}) {
    auto model = std::make_shared<DeepNet>();
    EngineConfig ec = cpu_config(3, Precision::fp32, Precision::fp32);
    ec.bucket_mb = 0.01;
    ec.prefetch = prefetch;
    Engine engine(model, ec, OptimConfig{}, SchedulerConfig{}, comm);
    engine.backward(model->forward(torch::randn({4, 64})).pow(2).mean());
    engine.step();
    // In backward the last bucket, still gathered after forward, overlaps with one more gather.
    EXPECT_LE(engine.peak_gathered_buckets(), 2 + prefetch) << "prefetch " << prefetch;
    EXPECT_GE(engine.peak_gathered_buckets(), 1 + prefetch) << "prefetch " << prefetch;
  }
}

// Counts the collectives the engine issues, forwarding them to the real communicator.
class CountingCommunicator final : public Communicator {
 public:
  explicit CountingCommunicator(std::shared_ptr<Communicator> inner) : inner_(std::move(inner)) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  int local_rank() const override { return inner_->local_rank(); }
  int local_size() const override { return inner_->local_size(); }
  std::string backend() const override { return "counting"; }
  WorkHandle allreduce(const torch::Tensor& t, ReduceOp op) override { ++allreduces; return inner_->allreduce(t, op); }
  WorkHandle reduce_scatter(const torch::Tensor& i, const torch::Tensor& o, ReduceOp op) override {
    ++reduce_scatters;
    return inner_->reduce_scatter(i, o, op);
  }
  WorkHandle allgather(const torch::Tensor& i, const torch::Tensor& o) override { ++allgathers; return inner_->allgather(i, o); }
  WorkHandle broadcast(const torch::Tensor& t, int root) override { return inner_->broadcast(t, root); }
  void barrier() override { inner_->barrier(); }
  void reset() { allreduces = reduce_scatters = allgathers = 0; }
  int allreduces = 0, reduce_scatters = 0, allgathers = 0;

 private:
  std::shared_ptr<Communicator> inner_;
};

TEST(DistCommPattern, NonBoundaryMicroStepsByStage) {
  auto counting = std::make_shared<CountingCommunicator>(world_communicator());
  for (int stage : {0, 1, 2, 3}) {
    auto model = std::make_shared<SquareNet>();
    EngineConfig ec = cpu_config(stage, Precision::fp32, Precision::fp32);
    ec.accumulation_steps = 3;
    ec.bucket_mb = 0.01;  // 10 KiB: each 16 KiB unit is a bucket of its own
    Engine engine(model, ec, OptimConfig{}, SchedulerConfig{}, counting);
    auto x = torch::randn({4, 64});
    for (int m = 0; m < 3; ++m) {
      counting->reset();
      auto loss = model->forward(x).pow(2).mean();
      // Stage 3 gathers each bucket for its forward (once: the last stays gathered into backward) ...
      if (stage == 3) {
        EXPECT_EQ(counting->allgathers, 4) << "micro-step " << m;
      }
      counting->reset();
      engine.backward(loss);
      // ... and again for its backward, except the last one.
      if (stage == 3) {
        EXPECT_EQ(counting->allgathers, 3) << "micro-step " << m;
      }
      const bool boundary = m == 2;
      const int units = 4;
      if (stage == 0) {
        EXPECT_EQ(counting->allreduces, boundary ? units : 0) << "micro-step " << m;
        EXPECT_EQ(counting->reduce_scatters, 0);
      } else if (stage == 1 || counting->size() == 1) {  // one rank: stages 2 and 3 keep gradients stage 1's way
        EXPECT_EQ(counting->reduce_scatters, boundary ? units : 0) << "micro-step " << m;
        EXPECT_EQ(counting->allreduces, 0);
      } else {
        EXPECT_EQ(counting->reduce_scatters, units) << "micro-step " << m;  // every micro-step
        EXPECT_EQ(counting->allreduces, 0);
      }
    }
    counting->reset();
    engine.step();
    EXPECT_EQ(counting->allgathers, stage == 1 || stage == 2 ? 4 : 0) << "stage " << stage;
    EXPECT_EQ(counting->allreduces, stage == 0 ? 0 : 1) << "stage " << stage;  // the grad-norm allreduce
  }
}

TEST(DistCommPattern, SmallUnitsAreFusedIntoBuckets) {
  auto counting = std::make_shared<CountingCommunicator>(world_communicator());
  for (int stage : {0, 1, 2}) {
    for (double bucket_mb : {1.0, 0.04}) {  // all four 16 KiB units in one bucket; or two per bucket
      auto model = std::make_shared<SquareNet>();
      EngineConfig ec = cpu_config(stage, Precision::fp32, Precision::fp32);
      ec.bucket_mb = bucket_mb;
      Engine engine(model, ec, OptimConfig{}, SchedulerConfig{}, counting);
      const int buckets = bucket_mb >= 1.0 ? 1 : 2;
      EXPECT_EQ(static_cast<int>(engine.buckets().size()), buckets);
      counting->reset();
      engine.backward(model->forward(torch::randn({4, 64})).pow(2).mean());
      EXPECT_EQ(stage == 0 ? counting->allreduces : counting->reduce_scatters, buckets) << "stage " << stage;
      counting->reset();
      engine.step();
      EXPECT_EQ(counting->allgathers, stage == 0 ? 0 : buckets) << "stage " << stage;
    }
  }
}

TEST(BucketPlan, GroupsNeighboursUpToTheLimit) {
  const auto buckets = plan_buckets({10, 10, 30, 5, 5, 5}, 20);
  ASSERT_EQ(buckets.size(), 3u);
  EXPECT_EQ(buckets[0].first, 0u);
  EXPECT_EQ(buckets[0].last, 1u);
  EXPECT_EQ(buckets[1].first, 2u);  // larger than the limit: alone
  EXPECT_EQ(buckets[1].last, 2u);
  EXPECT_EQ(buckets[2].first, 3u);
  EXPECT_EQ(buckets[2].last, 5u);
}

// The grouped collectives pack pieces rank-major on the CPU backends: each rank receives exactly every
// piece's own slice, summed (or averaged, or added to what the output held).
TEST(DistGroupedCollectives, ReduceScatterAllgatherAllreduceMany) {
  auto comm = world_communicator();
  const int64_t n = comm->size(), r = comm->rank();
  // Piece i on rank q holds (i+1)·100 + q + arange.
  std::vector<torch::Tensor> inputs, outputs, expected;
  for (int64_t i = 0; i < 3; ++i) {
    const int64_t per_rank = 2 + i;
    inputs.push_back(torch::arange(n * per_rank, torch::kFloat32) + (i + 1) * 100 + r);
    outputs.push_back(torch::full({per_rank}, 7.0f));
    const auto slice = torch::arange(r * per_rank, (r + 1) * per_rank, torch::kFloat32);
    expected.push_back(slice * n + (i + 1) * 100 * n + n * (n - 1) / 2.0);
  }
  comm->reduce_scatter_many(inputs, outputs, ReduceOp::sum)->wait();
  for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(outputs[i].allclose(expected[i])) << "piece " << i;
  comm->reduce_scatter_many(inputs, outputs, ReduceOp::sum, /*accumulate=*/true)->wait();
  for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(outputs[i].allclose(2 * expected[i])) << "accumulated piece " << i;
  comm->reduce_scatter_many(inputs, outputs, ReduceOp::avg)->wait();
  for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(outputs[i].allclose(expected[i] / n)) << "averaged piece " << i;

  std::vector<torch::Tensor> shards, full;
  for (int64_t i = 0; i < 2; ++i) {
    full.push_back(torch::zeros({n * (3 + i)}, torch::kBFloat16));
    shards.push_back(full.back().narrow(0, r * (3 + i), 3 + i));  // in place: the own slot
    shards.back().copy_(torch::full({3 + i}, static_cast<float>(10 * i + r)));
  }
  comm->allgather_many(shards, full)->wait();
  for (int64_t i = 0; i < 2; ++i) {
    for (int64_t q = 0; q < n; ++q) {
      EXPECT_TRUE(full[i].narrow(0, q * (3 + i), 3 + i).to(torch::kFloat32).eq(10 * i + q).all().item<bool>());
    }
  }
  std::vector<torch::Tensor> sums{torch::full({2}, static_cast<double>(r), torch::kFloat64),
                                  torch::full({3}, 1.0, torch::kFloat64)};
  comm->allreduce_many(sums, ReduceOp::sum)->wait();
  EXPECT_TRUE(sums[0].allclose(torch::full({2}, n * (n - 1) / 2.0, torch::kFloat64)));
  EXPECT_TRUE(sums[1].allclose(torch::full({3}, static_cast<double>(n), torch::kFloat64)));
}

// The engine owns placement: a model moved (or parameters replaced) after it was built is refused at the
// next backward, naming the unit, instead of training tensors the engine no longer updates.
TEST(EngineRefusals, ModelMovedAfterTheEngineWasBuilt) {
  auto comm = world_communicator();
  auto model = std::make_shared<SquareNet>();
  Engine engine(model, cpu_config(2, Precision::fp32, Precision::fp32), OptimConfig{}, SchedulerConfig{}, comm);
  model->to(torch::kFloat64);
  try {
    engine.backward(model->forward(torch::randn({4, 64})).to(torch::kFloat32).pow(2).mean());
    FAIL() << "expected a refusal";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the parameters of unit 'l0' no longer live in the engine's buffers"),
              std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace zest::testing
