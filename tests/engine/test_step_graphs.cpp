// StepGraphs on the CPU (engine/step_graphs.h): every step runs eagerly and equals the plain
// backward()/step() loop bitwise; the shape key tells shapes and dtypes apart; `cuda_graphs` is read
// strictly. The replay itself is tested on the GPU (tests/gpu/test_gpu_step_graphs.cpp).
#include "comm/self_communicator.h"
#include "core/config_reader.h"
#include "engine/engine.h"
#include "engine/step_graphs.h"
#include "toy_models.h"

#include <gtest/gtest.h>

namespace zest::testing {
namespace {

OptimConfig adamw() {
  OptimConfig c;
  c.lr = 3e-3;
  c.weight_decay = 0.1;
  return c;
}

std::map<std::string, torch::Tensor> train(bool through_graphs) {
  auto model = std::make_shared<ToyNet>(3);
  EngineConfig ec;
  ec.device = DeviceKind::cpu;
  ec.precision = Precision::fp32;
  ec.accumulation_steps = 2;
  Engine engine(model, ec, adamw(), SchedulerConfig{}, std::make_shared<SelfCommunicator>());
  StepGraphs graphs(engine, {});
  EXPECT_FALSE(graphs.is_enabled());
  EXPECT_NE(graphs.disabled_reason().find("cpu"), std::string::npos) << graphs.disabled_reason();
  for (int step = 0; step < 5; ++step) {
    auto [x, y] = toy_batch(step, 8);
    auto loss_of = [&](const StepGraphs::Inputs& in, int) {
      return torch::mse_loss(model->forward(in.at("x")), in.at("y"));
    };
    if (through_graphs) {
      const auto losses = graphs.step({{{"x", x.narrow(0, 0, 4)}, {"y", y.narrow(0, 0, 4)}},
                                       {{"x", x.narrow(0, 4, 4)}, {"y", y.narrow(0, 4, 4)}}},
                                      loss_of);
      EXPECT_EQ(losses.sizes(), (std::vector<int64_t>{2}));
    } else {
      for (int m = 0; m < 2; ++m)
        engine.backward(loss_of({{"x", x.narrow(0, 4 * m, 4)}, {"y", y.narrow(0, 4 * m, 4)}}, m));
      engine.step();
    }
  }
  EXPECT_EQ(graphs.replays(), 0);
  EXPECT_EQ(engine.read_stats().step, 5);
  std::map<std::string, torch::Tensor> out;
  for (const auto& item : model->named_parameters()) out[item.key()] = item.value().detach().clone();
  return out;
}

TEST(StepGraphsCpu, EagerStepsEqualThePlainLoop) {
  const auto plain = train(false);
  const auto graphed = train(true);
  for (const auto& [name, value] : plain) EXPECT_TRUE(torch::equal(value, graphed.at(name))) << name;
}

TEST(StepGraphsCpu, TheStepCountsMustMatchTheAccumulation) {
  auto model = std::make_shared<ToyNet>(3);
  EngineConfig ec;
  ec.device = DeviceKind::cpu;
  ec.accumulation_steps = 2;
  Engine engine(model, ec, adamw(), SchedulerConfig{}, std::make_shared<SelfCommunicator>());
  StepGraphs graphs(engine, {});
  auto [x, y] = toy_batch(0, 4);
  EXPECT_THROW(graphs.step({{{"x", x}, {"y", y}}}, [&](const StepGraphs::Inputs& in, int) {
    return torch::mse_loss(model->forward(in.at("x")), in.at("y"));
  }), std::exception);
}

TEST(StepGraphsCpu, TheShapeKeyTellsShapesAndDtypesApart) {
  const auto a = torch::zeros({2, 3});
  const std::string key = shape_key({{{"x", a}}});
  EXPECT_EQ(key, shape_key({{{"x", torch::ones({2, 3})}}}));  // values do not matter
  EXPECT_NE(key, shape_key({{{"x", torch::zeros({3, 2})}}}));
  EXPECT_NE(key, shape_key({{{"x", a.to(torch::kFloat64)}}}));
  // Every dtype has its own name: int8 and uint8 inputs of one shape are different graphs.
  EXPECT_NE(shape_key({{{"x", a.to(torch::kInt8)}}}), shape_key({{{"x", a.to(torch::kUInt8)}}}));
  EXPECT_NE(key, shape_key({{{"y", a}}}));
  EXPECT_NE(key, shape_key({{{"x", a}}, {{"x", a}}}));  // two micro-batches
}

TEST(StepGraphsCpu, CudaGraphsIsReadStrictly) {
  {
    ConfigTable t = ConfigTable::parse_string("cuda_graphs = \"off\"\n", "run.toml");
    EXPECT_EQ(EngineConfig::from_toml(t).cuda_graphs, CudaGraphs::off);
  }
  ConfigTable t = ConfigTable::parse_string("cuda_graphs = \"on\"\n", "run.toml");
  try {
    EngineConfig::from_toml(t);
    FAIL() << "cuda_graphs = \"on\" was accepted";
  } catch (const std::exception& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("cuda_graphs"), std::string::npos) << what;
    EXPECT_NE(what.find("auto"), std::string::npos) << what;
  }
  EXPECT_EQ(EngineConfig{}.cuda_graphs, CudaGraphs::auto_);
}

}  // namespace
}  // namespace zest::testing
