// Model-state accounting held to the ZeRO formulas, and the collectives each micro-step issues
// (stages 0/1 stay silent on non-boundary micro-steps; stage 2 reduce-scatters every micro-step).
#include "engine/engine.h"
#include "engine/memory_model.h"
#include "comm/world.h"
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
  // 7.5B parameters, 64 GPUs, mixed-precision Adam: 120 / 31.4 / 16.6 / 1.9 GB.
  const double expected[] = {120.0, 31.4, 16.6, 1.9};
  for (int stage = 0; stage <= 3; ++stage) {
    MemoryModelInputs in{7'500'000'000, 64, stage, Precision::bf16, Precision::bf16, 8};
    const double gb = estimate_model_state_bytes(in).total() / 1e9;
    EXPECT_NEAR(gb, expected[stage], 0.05) << "stage " << stage;
  }
}

TEST(DistMemory, EngineBuffersMatchTheFormula) {
  auto comm = world_communicator();
  for (int stage : {0, 1, 2}) {
    for (Precision reduce : {Precision::bf16, Precision::fp32}) {
      auto model = std::make_shared<SquareNet>();
      EngineConfig ec;
      ec.stage = stage;
      ec.precision = Precision::bf16;
      ec.reduce_dtype = reduce;
      Engine engine(model, ec, OptimConfig{}, SchedulerConfig{}, comm);
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
        const int64_t paper[] = {16 * P, 4 * P + 12 * P / N, 2 * P + 14 * P / N};
        EXPECT_EQ(actual.total(), paper[stage]) << "stage " << stage;
      }
    }
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
  for (int stage : {0, 1, 2}) {
    auto model = std::make_shared<SquareNet>();
    EngineConfig ec;
    ec.stage = stage;
    ec.precision = Precision::fp32;
    ec.accumulation_steps = 3;
    ec.bucket_mb = 0.01;  // 10 KiB: each 16 KiB unit is a bucket of its own
    Engine engine(model, ec, OptimConfig{}, SchedulerConfig{}, counting);
    auto x = torch::randn({4, 64});
    for (int m = 0; m < 3; ++m) {
      counting->reset();
      engine.backward(model->forward(x).pow(2).mean());
      const bool boundary = m == 2;
      const int units = 4;
      if (stage == 0) {
        EXPECT_EQ(counting->allreduces, boundary ? units : 0) << "micro-step " << m;
        EXPECT_EQ(counting->reduce_scatters, 0);
      } else if (stage == 1) {
        EXPECT_EQ(counting->reduce_scatters, boundary ? units : 0) << "micro-step " << m;
        EXPECT_EQ(counting->allreduces, 0);
      } else {
        EXPECT_EQ(counting->reduce_scatters, units) << "micro-step " << m;  // every micro-step
      }
    }
    counting->reset();
    engine.step();
    EXPECT_EQ(counting->allgathers, stage == 0 ? 0 : 4) << "stage " << stage;
    EXPECT_EQ(counting->allreduces, stage == 0 ? 0 : 1) << "stage " << stage;  // the grad-norm allreduce
  }
}

TEST(DistCommPattern, SmallUnitsAreFusedIntoBuckets) {
  auto counting = std::make_shared<CountingCommunicator>(world_communicator());
  for (int stage : {0, 1, 2}) {
    for (double bucket_mb : {1.0, 0.04}) {  // all four 16 KiB units in one bucket; or two per bucket
      auto model = std::make_shared<SquareNet>();
      EngineConfig ec;
      ec.stage = stage;
      ec.precision = Precision::fp32;
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

TEST(BucketPlan, RankMajorPackingRoundTrips) {
  auto a = torch::arange(8, torch::kFloat32), b = torch::arange(100, 104, torch::kFloat32);
  auto packed = pack_rank_major({a, b}, /*world_size=*/2);
  // Row r = [a's slice r | b's slice r].
  EXPECT_TRUE(packed.equal(torch::tensor({0, 1, 2, 3, 100, 101, 4, 5, 6, 7, 102, 103}, torch::kFloat32)));
  auto a2 = torch::zeros(8), b2 = torch::zeros(4);
  unpack_rank_major(packed, {a2, b2}, 2);
  EXPECT_TRUE(a2.equal(a));
  EXPECT_TRUE(b2.equal(b));
}

}  // namespace
}  // namespace zest::testing
