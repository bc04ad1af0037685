// Tests of activation checkpointing: gradients and outputs bitwise equal to plain runs on a small
// transformer-ish UnitModule (dropout included), the no-grad forward, nesting and the policies.
#include "engine/activation_checkpoint.h"

#include "core/check.h"
#include "core/compat.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <string>

namespace zest {
namespace {

constexpr int64_t kWidth = 16;
constexpr int64_t kInDim = 6;
constexpr int64_t kBlocks = 4;

// A pre-norm block: masked single-head attention and a GELU MLP, both modulated by a conditioning c.
struct BlockImpl : torch::nn::Module {
  explicit BlockImpl(double dropout_p) : dropout_p(dropout_p) {
    ln1 = register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({kWidth})));
    qkv = register_module("qkv", torch::nn::Linear(kWidth, 3 * kWidth));
    proj = register_module("proj", torch::nn::Linear(kWidth, kWidth));
    ln2 = register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({kWidth})));
    fc1 = register_module("fc1", torch::nn::Linear(kWidth, 4 * kWidth));
    fc2 = register_module("fc2", torch::nn::Linear(4 * kWidth, kWidth));
    mod = register_module("mod", torch::nn::Linear(kWidth, 2 * kWidth));
  }

  // h [B, S, W], c [B, W], mask [B, S] (bool, true = attend).
  torch::Tensor forward(const torch::Tensor& h, const torch::Tensor& c, const torch::Tensor& mask) {
    const auto scale_shift = mod->forward(c).unsqueeze(1).chunk(2, -1);
    auto qkv_out = qkv->forward(ln1->forward(h) * (1 + scale_shift[0]) + scale_shift[1]).chunk(3, -1);
    const auto bias = torch::zeros({h.size(0), 1, 1, h.size(1)}, h.options())
                          .masked_fill(mask.logical_not().view({h.size(0), 1, 1, h.size(1)}), -1e9);
    auto attn = compat::scaled_dot_product_attention(qkv_out[0].unsqueeze(1), qkv_out[1].unsqueeze(1),
                                                     qkv_out[2].unsqueeze(1), bias);
    auto x = h + proj->forward(attn.squeeze(1));
    auto mlp = fc2->forward(torch::dropout(torch::gelu(fc1->forward(ln2->forward(x))), dropout_p,
                                           is_training()));
    return x + mlp;
  }

  double dropout_p;
  torch::nn::LayerNorm ln1{nullptr}, ln2{nullptr};
  torch::nn::Linear qkv{nullptr}, proj{nullptr}, fc1{nullptr}, fc2{nullptr}, mod{nullptr};
};
TORCH_MODULE(Block);

// Units: "embed" (fed by data that does not require grad, plus an undefined optional input),
// "cond", "blocks.i" (passing c and the bool mask through, and an undefined output), "final".
class ToyStack : public UnitModule {
 public:
  explicit ToyStack(double dropout_p = 0.0) {
    embed_ = register_module("embed", torch::nn::Linear(kInDim, kWidth));
    cond_ = register_module("cond", torch::nn::Linear(1, kWidth));
    blocks_ = register_module("blocks", torch::nn::ModuleList());
    for (int64_t i = 0; i < kBlocks; ++i) blocks_->push_back(Block(dropout_p));
    norm_ = register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({kWidth})));
    out_ = register_module("out", torch::nn::Linear(kWidth, kInDim));
  }

  std::vector<UnitDecl> unit_decls() const override {
    std::vector<UnitDecl> decls{{"embed", {"embed."}}, {"cond", {"cond."}}};
    for (int64_t i = 0; i < kBlocks; ++i) {
      decls.push_back({"blocks." + std::to_string(i), {"blocks." + std::to_string(i) + "."}});
    }
    decls.push_back({"final", {"norm.", "out."}});
    return decls;
  }

  // x [B, S, kInDim], t [B, 1], mask [B, S] bool.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& t, const torch::Tensor& mask) {
    const auto h0 = run_unit(
        "embed",
        [this](const Tensors& in) {
          EXPECT_FALSE(in[1].defined());
          return Tensors{embed_->forward(in[0])};
        },
        {x, torch::Tensor()})[0];
    const UnitFn cond = [this](const Tensors& in) { return Tensors{torch::silu(cond_->forward(in[0]))}; };
    const auto c = run_unit("cond", cond, {t})[0];
    Tensors state{h0, c, mask, torch::Tensor()};
    for (int64_t i = 0; i < kBlocks; ++i) {
      state = run_unit(
          "blocks." + std::to_string(i),
          [this, i](const Tensors& in) {
            EXPECT_FALSE(in[3].defined());
            const auto h = blocks_[i]->as<BlockImpl>()->forward(in[0], in[1], in[2]);
            return Tensors{h, in[1], in[2], torch::Tensor()};
          },
          state);
      EXPECT_EQ(state[2].scalar_type(), torch::kBool);
      EXPECT_FALSE(state[3].defined());
    }
    const UnitFn head = [this](const Tensors& in) { return Tensors{out_->forward(norm_->forward(in[0]))}; };
    return run_unit("final", head, {state[0]})[0];
  }

 private:
  torch::nn::Linear embed_{nullptr}, cond_{nullptr}, out_{nullptr};
  torch::nn::LayerNorm norm_{nullptr};
  torch::nn::ModuleList blocks_{nullptr};
};

struct Batch {
  torch::Tensor x, t, mask;
};

Batch make_batch(bool x_requires_grad = false) {
  torch::manual_seed(7);
  Batch b{torch::randn({3, 5, kInDim}), torch::rand({3, 1}), torch::ones({3, 5}, torch::kBool)};
  b.mask.index_put_({0, torch::indexing::Slice(3)}, false);
  b.mask.index_put_({2, 4}, false);
  if (x_requires_grad) b.x.requires_grad_(true);
  return b;
}

struct RunResult {
  torch::Tensor out;
  std::map<std::string, torch::Tensor> grads;
  torch::Tensor x_grad;
};

// Builds the model with the same initialisation every time, runs forward + backward once.
RunResult run_model(const std::shared_ptr<UnitRunner>& runner, double dropout_p = 0.0,
                    bool x_requires_grad = false, std::shared_ptr<UnitRunner> inner = nullptr) {
  torch::manual_seed(0);
  auto model = std::make_shared<ToyStack>(dropout_p);
  model->set_unit_runner(runner);
  const Batch batch = make_batch(x_requires_grad);
  torch::manual_seed(123);  // dropout draws
  RunResult result;
  result.out = model->forward(batch.x, batch.t, batch.mask);
  result.out.pow(2).mean().backward();
  for (const auto& p : model->named_parameters()) {
    EXPECT_TRUE(p.value().grad().defined()) << p.key();
    result.grads[p.key()] = p.value().grad();
  }
  if (x_requires_grad) result.x_grad = batch.x.grad();
  return result;
}

std::vector<std::string> unit_names() {
  std::vector<std::string> names;
  for (const auto& decl : ToyStack().unit_decls()) names.push_back(decl.name);
  return names;
}

std::shared_ptr<UnitRunner> checkpointing(CheckpointPolicy policy, int every = 2,
                                          std::shared_ptr<UnitRunner> inner = nullptr) {
  return std::make_shared<CheckpointRunner>(policy, every, unit_names(), std::move(inner));
}

void expect_bitwise_equal(const RunResult& expected, const RunResult& actual) {
  EXPECT_TRUE(torch::equal(expected.out, actual.out));
  ASSERT_EQ(expected.grads.size(), actual.grads.size());
  for (const auto& [name, grad] : expected.grads) {
    ASSERT_TRUE(actual.grads.at(name).defined()) << name;
    EXPECT_TRUE(torch::equal(grad, actual.grads.at(name)))
        << name << ": max abs diff " << (grad - actual.grads.at(name)).abs().max().item<float>();
  }
  if (expected.x_grad.defined()) {
    EXPECT_TRUE(torch::equal(expected.x_grad, actual.x_grad));
  }
}

// Records every unit it runs and whether grad mode was on, then runs the unit.
class RecordingRunner : public UnitRunner {
 public:
  Tensors run(const std::string& unit_name, const UnitFn& fn, const Tensors& inputs) override {
    calls.emplace_back(unit_name, torch::GradMode::is_enabled());
    return fn(inputs);
  }
  std::vector<std::pair<std::string, bool>> calls;
};

TEST(ActivationCheckpoint, PolicySelectsUnits) {
  for (size_t idx = 0; idx < 6; ++idx) {
    EXPECT_FALSE(is_checkpointed_unit(CheckpointPolicy::none, 2, idx));
    EXPECT_TRUE(is_checkpointed_unit(CheckpointPolicy::all, 2, idx));
    EXPECT_EQ(is_checkpointed_unit(CheckpointPolicy::every_k, 2, idx), idx % 2 == 0);
    EXPECT_EQ(is_checkpointed_unit(CheckpointPolicy::every_k, 3, idx), idx % 3 == 0);
    EXPECT_TRUE(is_checkpointed_unit(CheckpointPolicy::every_k, 1, idx));
  }
  EXPECT_THROW(is_checkpointed_unit(CheckpointPolicy::every_k, 0, 1), Error);
  const CheckpointRunner runner(CheckpointPolicy::every_k, 2, unit_names());
  EXPECT_TRUE(runner.is_checkpointed("embed"));
  EXPECT_FALSE(runner.is_checkpointed("cond"));
  EXPECT_TRUE(runner.is_checkpointed("blocks.0"));
  EXPECT_FALSE(runner.is_checkpointed("blocks.3"));
}

TEST(ActivationCheckpoint, GradientsBitwiseEqualAll) {
  const RunResult plain = run_model(nullptr);
  expect_bitwise_equal(plain, run_model(checkpointing(CheckpointPolicy::all)));
}

TEST(ActivationCheckpoint, GradientsBitwiseEqualEvery2) {
  const RunResult plain = run_model(nullptr);
  expect_bitwise_equal(plain, run_model(checkpointing(CheckpointPolicy::every_k, 2)));
}

TEST(ActivationCheckpoint, InputGradientsBitwiseEqual) {
  const RunResult plain = run_model(nullptr, 0.0, /*x_requires_grad=*/true);
  ASSERT_TRUE(plain.x_grad.defined());
  expect_bitwise_equal(plain, run_model(checkpointing(CheckpointPolicy::all), 0.0, true));
}

TEST(ActivationCheckpoint, DropoutReplayedFromForwardRngState) {
  const RunResult plain = run_model(nullptr, 0.3);
  const RunResult no_dropout = run_model(nullptr, 0.0);
  EXPECT_FALSE(torch::equal(plain.out, no_dropout.out));  // dropout is really active
  expect_bitwise_equal(plain, run_model(checkpointing(CheckpointPolicy::all), 0.3));
}

TEST(ActivationCheckpoint, RecomputeDoesNotShiftRandomStream) {
  torch::manual_seed(0);
  auto model = std::make_shared<ToyStack>(0.3);
  model->set_unit_runner(checkpointing(CheckpointPolicy::all));
  const Batch batch = make_batch();
  torch::manual_seed(5);
  model->forward(batch.x, batch.t, batch.mask).pow(2).mean().backward();
  const torch::Tensor after_checkpointed = torch::rand({4});
  model->set_unit_runner(nullptr);
  torch::manual_seed(5);
  model->forward(batch.x, batch.t, batch.mask).pow(2).mean().backward();
  EXPECT_TRUE(torch::equal(after_checkpointed, torch::rand({4})));
}

// The runner learns from the forwards whether a checkpointed unit draws random numbers — what decides whether
// its steps can be captured as CUDA graphs (engine/step_graphs.h) — and refuses a capture once one has.
TEST(ActivationCheckpoint, RunnerNamesTheFirstUnitThatDrawsRandomNumbers) {
  for (const double dropout_p : {0.0, 0.3}) {
    torch::manual_seed(0);
    auto model = std::make_shared<ToyStack>(dropout_p);
    const auto runner = std::make_shared<CheckpointRunner>(CheckpointPolicy::all, 1, unit_names());
    model->set_unit_runner(runner);
    const Batch batch = make_batch();
    model->forward(batch.x, batch.t, batch.mask).pow(2).mean().backward();
    if (dropout_p == 0.0) {
      EXPECT_EQ(runner->unit_drawing_random_numbers(), "");
      runner->set_capturing(true);  // nothing to restore: allowed
      runner->set_capturing(false);
    } else {
      EXPECT_EQ(runner->unit_drawing_random_numbers(), "blocks.0");
      try {
        runner->set_capturing(true);
        FAIL() << "a capture was allowed although blocks.0 draws random numbers";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("'blocks.0' draws random numbers"), std::string::npos) << e.what();
      }
    }
  }
}

// Without generator access (inside a capture) a unit that draws none gives the plain run's gradients.
TEST(ActivationCheckpoint, UnitsRunWithoutGeneratorAccessWhenCapturing) {
  const RunResult plain = run_model(nullptr);
  const auto runner = std::make_shared<CheckpointRunner>(CheckpointPolicy::all, 1, unit_names());
  runner->set_capturing(true);
  expect_bitwise_equal(plain, run_model(runner));
  EXPECT_EQ(runner->unit_drawing_random_numbers(), "");  // not watched while capturing
}

TEST(ActivationCheckpoint, ForwardKeepsNoGraphAndRecomputesWithGrad) {
  auto recorder = std::make_shared<RecordingRunner>();
  const RunResult plain = run_model(nullptr);
  const RunResult nested = run_model(checkpointing(CheckpointPolicy::every_k, 2, recorder));
  expect_bitwise_equal(plain, nested);
  // Forward: all 7 units through the inner runner; the checkpointed ones (positions 0, 2, 4, 6: embed,
  // blocks.0, blocks.2, final) under no-grad. Backward: those again, with grad, in reverse order.
  const std::vector<std::pair<std::string, bool>> expected{
      {"embed", false},   {"cond", true},     {"blocks.0", false}, {"blocks.1", true},
      {"blocks.2", false}, {"blocks.3", true}, {"final", false},    {"final", true},
      {"blocks.2", true},  {"blocks.0", true}, {"embed", true}};
  EXPECT_EQ(recorder->calls, expected);
}

TEST(ActivationCheckpoint, NoGradRunsPlainly) {
  torch::manual_seed(0);
  auto model = std::make_shared<ToyStack>();
  const Batch batch = make_batch();
  const torch::NoGradGuard no_grad;
  const torch::Tensor plain = model->forward(batch.x, batch.t, batch.mask);
  model->set_unit_runner(checkpointing(CheckpointPolicy::all));
  const torch::Tensor checkpointed = model->forward(batch.x, batch.t, batch.mask);
  EXPECT_TRUE(torch::equal(plain, checkpointed));
  EXPECT_FALSE(checkpointed.requires_grad());
}

TEST(ActivationCheckpoint, UnknownUnitIsAnError) {
  CheckpointRunner runner(CheckpointPolicy::all, 1, {"a", "b"});
  const UnitFn identity = [](const Tensors& in) { return in; };
  try {
    runner.run("c", identity, {torch::ones({1})});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unit 'c'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("a, b"), std::string::npos) << e.what();
  }
  EXPECT_THROW(CheckpointRunner(CheckpointPolicy::all, 1, {"a", "a"}), Error);
}

TEST(ActivationCheckpoint, MakeRunnerFollowsConfig) {
  const ToyStack model;
  EngineConfig config;
  config.activation_checkpointing = CheckpointPolicy::none;
  auto inner = std::make_shared<RecordingRunner>();
  EXPECT_EQ(make_checkpoint_runner(config, model, inner), nullptr);  // no decorator for policy none
  EXPECT_EQ(make_checkpoint_runner(config, model), nullptr);
  config.activation_checkpointing = CheckpointPolicy::every_k;
  config.checkpoint_every = 3;
  const auto runner = std::dynamic_pointer_cast<CheckpointRunner>(make_checkpoint_runner(config, model));
  ASSERT_NE(runner, nullptr);
  EXPECT_TRUE(runner->is_checkpointed("embed"));
  EXPECT_FALSE(runner->is_checkpointed("cond"));
  EXPECT_TRUE(runner->is_checkpointed("blocks.1"));
}

}  // namespace
}  // namespace zest
