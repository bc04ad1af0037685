// The [ema] table and ShardedEma on one process: the decay rule is diffusers' EMAModel.get_decay, the
// update is its step(), skipped and off-schedule steps leave the average untouched, and the table is
// read strictly and printed back.
#include "core/config_reader.h"
#include "core/config_writer.h"
#include "engine/memory_model.h"
#include "optim/ema.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

namespace zest::testing {
namespace {

EmaConfig read(const std::string& text, bool present = true) {
  ConfigTable root = ConfigTable::parse_string(text, "run.toml");
  ConfigTable table = root.table("ema");
  return EmaConfig::from_toml(table, present);
}

std::string error_of(const std::string& text) {
  try {
    read(text);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(EmaConfig, AbsentTableIsOffAndATableTurnsItOn) {
  EXPECT_FALSE(read("", /*present=*/false).enabled);
  const EmaConfig on = read("[ema]\n");
  EXPECT_TRUE(on.enabled);
  EXPECT_DOUBLE_EQ(on.decay, 0.9999);
  EXPECT_EQ(on.update_every, 1);
  EXPECT_EQ(on.start_step, 0);
  EXPECT_FALSE(on.use_ema_warmup);
  EXPECT_DOUBLE_EQ(on.inv_gamma, 1.0);
  EXPECT_DOUBLE_EQ(on.power, 2.0 / 3.0);
  EXPECT_FALSE(read("[ema]\nenabled = false\n").enabled);
  const EmaConfig warm = read("[ema]\ndecay = 0.999\nuse_ema_warmup = true\npower = 0.75\nupdate_every = 2\n");
  EXPECT_DOUBLE_EQ(warm.power, 0.75);
  EXPECT_EQ(warm.update_every, 2);
}

TEST(EmaConfig, BadValuesNameTheKey) {
  EXPECT_NE(error_of("[ema]\ndecay = 1.5\n").find("ema.decay: must be in [0, 1]"), std::string::npos);
  EXPECT_NE(error_of("[ema]\nupdate_every = 0\n").find("ema.update_every: must be >= 1"), std::string::npos);
  EXPECT_NE(error_of("[ema]\nstart_step = -1\n").find("ema.start_step"), std::string::npos);
  EXPECT_NE(error_of("[ema]\npower = 0.75\n").find("ema.power: is only used with use_ema_warmup = true"),
            std::string::npos);
  EXPECT_NE(error_of("[ema]\nuse_ema_warmup = true\ninv_gamma = 0\n").find("ema.inv_gamma: must be > 0"),
            std::string::npos);
  EXPECT_NE(error_of("[ema]\nupdate_after_step = 3\n").find("zest calls it start_step"), std::string::npos);
  EXPECT_NE(error_of("[ema]\ndecay = nan\n").find("ema.decay: must be in [0, 1]"), std::string::npos);
  EXPECT_NE(error_of("[ema]\nmin_decay = 0.5\ndecay = 0.4\n").find("ema.min_decay: must be in [0, decay]"),
            std::string::npos);
}

// The engine's own check (an EmaConfig built in code, not read from a run file) states the same ranges.
TEST(EmaConfig, ShardedEmaRefusesASettingOutOfRange) {
  EmaConfig c;
  c.enabled = true;
  c.decay = 0.4;
  c.min_decay = 0.5;
  try {
    ShardedEma ema(c, torch::zeros({4}));
    FAIL() << "accepted min_decay > decay";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("ema.min_decay must be in [0, decay], got 0.5"), std::string::npos) << e.what();
  }
  c.min_decay = 0.0;
  c.update_every = 0;
  EXPECT_EQ(c.range_problems().size(), 1u);
  EXPECT_THROW(ShardedEma(c, torch::zeros({4})), std::exception);
}

TEST(EmaConfig, PrintedTableReadsBackTheSame) {
  for (const std::string& text : {std::string("[ema]\nenabled = false\n"),
                                  std::string("[ema]\ndecay = 0.99\nstart_step = 4\n"),
                                  std::string("[ema]\nuse_ema_warmup = true\ninv_gamma = 2.0\npower = 0.75\n")}) {
    const EmaConfig first = read(text);
    ConfigWriter out;
    to_toml(first, out);
    const EmaConfig again = read(out.str());
    EXPECT_EQ(again.enabled, first.enabled) << out.str();
    EXPECT_DOUBLE_EQ(again.decay, first.decay);
    EXPECT_EQ(again.start_step, first.start_step);
    EXPECT_EQ(again.use_ema_warmup, first.use_ema_warmup);
    EXPECT_DOUBLE_EQ(again.inv_gamma, first.inv_gamma);
    EXPECT_DOUBLE_EQ(again.power, first.power);
  }
}

// diffusers' EMAModel.get_decay, written out independently of ema_decay_at.
double diffusers_decay(const EmaConfig& c, int64_t optimization_step) {
  const int64_t step = std::max<int64_t>(0, optimization_step - c.start_step - 1);
  if (step <= 0) return 0.0;
  double value = c.use_ema_warmup ? 1.0 - std::pow(1.0 + step / c.inv_gamma, -c.power) : c.decay;
  value = std::min(value, c.decay);
  return std::max(value, c.min_decay);
}

TEST(EmaDecay, IsDiffusersRule) {
  EmaConfig c;
  c.enabled = true;
  EXPECT_EQ(ema_decay_at(c, 1), 0.0);  // the first update copies the weights
  EXPECT_EQ(ema_decay_at(c, 2), 0.9999);
  c.use_ema_warmup = true;
  // crowsonkb's figures quoted by diffusers: power 2/3 reaches 0.999 at ~31.6K steps.
  EXPECT_NEAR(ema_decay_at(c, 31'624), 0.999, 1e-6);
  c.start_step = 5;
  c.min_decay = 0.5;
  for (int64_t step = 1; step < 200; ++step) EXPECT_DOUBLE_EQ(ema_decay_at(c, step), diffusers_decay(c, step)) << step;
  EXPECT_EQ(ema_decay_at(c, 6), 0.0);
  EXPECT_DOUBLE_EQ(ema_decay_at(c, 7), 0.5);  // warm-up gives 1 − 2^(−2/3) = 0.37: the floor applies
  EXPECT_NEAR(ema_decay_at(c, 12), 1.0 - std::pow(7.0, -2.0 / 3.0), 1e-15);
}

// The reference: diffusers' EMAModel.step on fp32 tensors, s ← s − (1 − d)·(s − p), with the gating
// zest adds (skipped steps and steps off the update_every schedule do nothing).
struct ReferenceEma {
  EmaConfig config;
  torch::Tensor shadow;
  void step(const torch::Tensor& param, int64_t step, bool applied) {
    if (!applied || step % config.update_every != 0) return;
    const double one_minus_decay = 1.0 - ema_decay_at(config, step);
    shadow.sub_(one_minus_decay * (shadow - param));
  }
};

void expect_matches_reference(EmaConfig config) {
  torch::manual_seed(3);
  torch::Tensor master = torch::randn({1000});
  ShardedEma ema(config, master);
  ReferenceEma reference{config, master.clone()};
  int64_t applied_steps = 0;
  for (int call = 0; call < 40; ++call) {
    const bool applied = call % 7 != 3;  // every 7th pass is a skipped (non-finite) step
    if (applied) {
      master += 0.1 * torch::randn({1000});
      ++applied_steps;
    }
    ema.update(master, torch::tensor(applied_steps), torch::tensor(applied ? 1.0f : 0.0f));
    reference.step(master, applied_steps, applied);
    ASSERT_LE((ema.shard() - reference.shadow).abs().max().item<double>(), 2e-6) << "call " << call;
  }
  EXPECT_GT((ema.shard() - master).abs().max().item<double>(), 0.05);  // it did average
}

TEST(ShardedEma, MatchesDiffusersStepConstantDecay) {
  EmaConfig c;
  c.enabled = true;
  c.decay = 0.9;
  expect_matches_reference(c);
}

TEST(ShardedEma, MatchesDiffusersStepWithWarmupScheduleAndStart) {
  EmaConfig c;
  c.enabled = true;
  c.decay = 0.95;
  c.use_ema_warmup = true;
  c.power = 0.75;
  c.inv_gamma = 2.0;
  c.update_every = 3;
  c.start_step = 4;
  c.min_decay = 0.1;
  expect_matches_reference(c);
}

// The device-side decay of ShardedEma against the formula, step by step, where the warm-up value lies
// below min_decay (the floor applies), between min_decay and decay, and above decay (the cap applies):
// master = 0 and ema = 1 before each update, so the EMA after it is the decay itself.
TEST(ShardedEma, DecayFollowsTheFormulaBelowAndAboveMinDecay) {
  EmaConfig c;
  c.enabled = true;
  c.decay = 0.9;
  c.min_decay = 0.5;
  c.use_ema_warmup = true;  // 1 − (1 + x)^(−2/3): 0.37 at x = 1, 0.5 near x = 1.8, 0.9 near x = 30.6
  c.start_step = 2;
  const torch::Tensor zeros = torch::zeros({16});
  ShardedEma ema(c, zeros);
  int floored = 0, between = 0, capped = 0;
  for (int64_t step = 1; step <= 40; ++step) {
    ema.load_shard(torch::ones({16}));
    ema.update(zeros, torch::tensor(step), torch::tensor(1.0f));
    const int64_t x = step - c.start_step - 1;
    double expected = 0.0;  // x ≤ 0: the EMA copies the weights
    if (x > 0) {
      const double warm = 1.0 - std::pow(1.0 + static_cast<double>(x), -2.0 / 3.0);
      expected = warm < 0.5 ? 0.5 : (warm > 0.9 ? 0.9 : warm);
      floored += warm < 0.5;
      between += warm >= 0.5 && warm <= 0.9;
      capped += warm > 0.9;
    }
    EXPECT_NEAR(ema.shard()[0].item<double>(), expected, 1e-7) << "step " << step;
    EXPECT_TRUE(ema.shard().eq(ema.shard()[0]).all().item<bool>()) << "step " << step;
    EXPECT_NEAR(ema_decay_at(c, step), expected, 1e-12) << "step " << step;
  }
  EXPECT_GT(floored, 0);
  EXPECT_GT(between, 0);
  EXPECT_GT(capped, 0);

  // Without the warm-up the decay is max(decay, min_decay) from the second update on.
  EmaConfig constant;
  constant.enabled = true;
  constant.decay = 0.75;
  constant.min_decay = 0.25;
  ShardedEma flat(constant, zeros);
  for (int64_t step = 1; step <= 3; ++step) {
    flat.load_shard(torch::ones({16}));
    flat.update(zeros, torch::tensor(step), torch::tensor(1.0f));
    EXPECT_EQ(flat.shard()[0].item<float>(), step == 1 ? 0.0f : 0.75f) << "step " << step;
  }
}

TEST(ShardedEma, SkippedAndOffScheduleStepsLeaveItBitwiseUntouched) {
  EmaConfig c;
  c.enabled = true;
  c.decay = 0.5;
  c.update_every = 2;
  torch::Tensor master = torch::randn({64});
  ShardedEma ema(c, master);
  ema.update(master + 1.0, torch::tensor(int64_t{2}), torch::tensor(1.0f));  // step 2: decay 0.5
  const torch::Tensor before = ema.shard().clone();
  ema.update(master + 5.0, torch::tensor(int64_t{3}), torch::tensor(1.0f));  // off schedule
  EXPECT_TRUE(ema.shard().equal(before));
  ema.update(master + 5.0, torch::tensor(int64_t{4}), torch::tensor(0.0f));  // skipped
  EXPECT_TRUE(ema.shard().equal(before));
  ema.update(master + 5.0, torch::tensor(int64_t{4}), torch::tensor(1.0f));
  EXPECT_FALSE(ema.shard().equal(before));
}

TEST(ShardedEma, StartsAsACopyAndLoadsShards) {
  EmaConfig c;
  c.enabled = true;
  const torch::Tensor master = torch::randn({48});
  ShardedEma ema(c, master);
  EXPECT_TRUE(ema.shard().equal(master));
  EXPECT_NE(ema.shard().data_ptr(), master.data_ptr());
  EXPECT_EQ(ema.bytes(), 48 * 4);
  const torch::Tensor values = torch::randn({48});
  ema.load_shard(values);
  EXPECT_TRUE(ema.shard().equal(values));
  EXPECT_THROW(ema.load_shard(torch::randn({47})), std::exception);
  EXPECT_THROW(ShardedEma(c, torch::randn({4}, torch::kFloat64)), std::exception);
}

// The EMA is laid out like the master: 4P bytes at stage 0 (whole units everywhere), 4P/N when sharded.
TEST(EmaMemory, FormulaFollowsTheMaster) {
  for (int stage = 0; stage <= 3; ++stage) {
    MemoryModelInputs in{8'000'000, 8, stage, Precision::bf16, Precision::fp32, 8, true};
    const ModelStateBytes with = estimate_model_state_bytes(in);
    in.ema = false;
    const ModelStateBytes without = estimate_model_state_bytes(in);
    EXPECT_EQ(with.ema, stage == 0 ? 32'000'000 : 4'000'000) << "stage " << stage;
    EXPECT_EQ(with.total(), without.total() + with.ema);
    EXPECT_EQ(without.ema, 0);
  }
}

}  // namespace
}  // namespace zest::testing
