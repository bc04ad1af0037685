// EmaConfig ([ema] reading, checking, printing), the host-side decay rule, and ShardedEma's update as
// device-side tensor ops (see ema.h).
#include "optim/ema.h"

#include "core/check.h"
#include "core/config_reader.h"
#include "core/config_writer.h"
#include "core/field_table.h"

#include <algorithm>
#include <cmath>

namespace zest {

const FieldTable<EmaConfig>& ema_fields() {
  static const FieldTable<EmaConfig> table = [] {
    using C = EmaConfig;
    FieldTable<C> t("ema", "exponential moving average of the weights (sharded like the master)",
                    {{"update_after_step", "zest calls it start_step"},
                     {"max_value", "zest calls it decay"},
                     {"min_value", "zest calls it min_decay"},
                     {"use_ema", "an [ema] table turns the EMA on (enabled = false turns it off)"}});
    const auto enabled = [](const C& c) { return c.enabled; };  // the other keys mean nothing without it
    const auto warmup = [](const C& c) { return c.use_ema_warmup; };
    const std::string warmup_only = "is only used with use_ema_warmup = true (the warm-up form of the decay)";
    t.boolean("enabled", &C::enabled, "keep an fp32 EMA of the master weights")
        .default_text("true when the table is present")
        .reference("keep an fp32 EMA of the master weights, sharded like the master (4P/N bytes per rank; 4P at stage "
                   "0); saved in checkpoints and written at the end (see \"The EMA\" below)");
    t.number("decay", &C::decay, "decay of the average (diffusers' EMAModel decay)")
        .written_when(enabled)
        .type("float in [0, 1]")
        .reference("decay of the average (diffusers' `EMAModel` decay)");
    t.number("min_decay", &C::min_decay, "floor of the decay once averaging has started")
        .written_when(enabled)
        .type("float in [0, decay]");
    t.integer("update_every", &C::update_every, "optimizer steps between EMA updates")
        .written_when(enabled)
        .type("int ≥ 1")
        .reference("only optimizer steps that are multiples of this update the EMA");
    t.integer("start_step", &C::start_step, "copy the weights up to step start_step + 1, then average")
        .written_when(enabled)
        .type("int ≥ 0")
        .reference("the EMA copies the weights up to step start_step + 1, then averages (diffusers' `update_after_step`)");
    t.boolean("use_ema_warmup", &C::use_ema_warmup, "decay = 1 - (1 + x/inv_gamma)^-power, at most decay")
        .written_when(enabled)
        .reference("diffusers' warm-up form of the decay (inv_gamma, power)");
    t.number("inv_gamma", &C::inv_gamma, "warm-up: inverse multiplicative factor")
        .written_when(enabled)
        .only_with(warmup, warmup_only)
        .type("float > 0")
        .reference("warm-up only: inverse multiplicative factor");
    t.number("power", &C::power, "warm-up: exponent")
        .written_when(enabled)
        .only_with(warmup, warmup_only)
        .type("float > 0")
        .default_text("2/3")
        .reference("warm-up only: exponent (2/3 reaches 0.999 at ~31.6K steps, 3/4 at ~10K)");
    // The ranges are stated once (range_problems), for the run file, the engine and checkpoint manifests.
    t.rules([](ConfigTable& table, C& c) {
      for (const EmaConfig::RangeProblem& p : c.range_problems()) table.fail(p.key, "must be " + p.expected);
    });
    return t;
  }();
  return table;
}

EmaConfig EmaConfig::from_toml(ConfigTable& table, bool present) {
  EmaConfig c;
  c.enabled = present;
  ema_fields().read(table, c);
  return c;
}

std::vector<EmaConfig::RangeProblem> EmaConfig::range_problems() const {
  std::vector<RangeProblem> problems;
  const auto need = [&](bool holds, const char* key, auto value, const char* expected) {
    if (!holds) problems.push_back({key, str(value), expected});
  };
  // Written so that NaN fails too.
  need(decay >= 0.0 && decay <= 1.0, "decay", decay, "in [0, 1]");
  need(min_decay >= 0.0 && min_decay <= decay, "min_decay", min_decay, "in [0, decay]");
  need(update_every >= 1, "update_every", update_every, ">= 1");
  need(start_step >= 0, "start_step", start_step, ">= 0");
  need(inv_gamma > 0.0, "inv_gamma", inv_gamma, "> 0");
  need(power > 0.0, "power", power, "> 0");
  return problems;
}

void EmaConfig::validate() const {
  const auto problems = range_problems();
  if (!problems.empty())
    ZEST_FAIL("ema.", problems[0].key, " must be ", problems[0].expected, ", got ", problems[0].value);
}

void to_toml(const EmaConfig& c, ConfigWriter& out) { ema_fields().write(c, out); }

double ema_decay_at(const EmaConfig& c, int64_t step) {
  const double x = static_cast<double>(step - c.start_step - 1);
  if (x <= 0) return 0.0;
  if (!c.use_ema_warmup) return std::max(c.decay, c.min_decay);
  const double warm = 1.0 - std::pow(1.0 + x / c.inv_gamma, -c.power);
  return std::max(std::min(warm, c.decay), c.min_decay);
}

ShardedEma::ShardedEma(const EmaConfig& config, const torch::Tensor& master_shard) : config_(config) {
  config_.validate();
  ZEST_CHECK(master_shard.scalar_type() == torch::kFloat32 && master_shard.dim() == 1,
             "ShardedEma: the master shard must be a 1-D fp32 tensor, got ", master_shard.scalar_type(), " of ",
             master_shard.dim(), " dimensions");
  ema_ = master_shard.detach().clone();
}

torch::Tensor ShardedEma::update_weight(const torch::Tensor& step, const torch::Tensor& applied) const {
  // Everything in float64 on the device, as the host rule computes it; only the weight becomes fp32.
  const torch::Tensor x = step.to(torch::kFloat64) - static_cast<double>(config_.start_step + 1);
  torch::Tensor decay;
  if (config_.use_ema_warmup) {
    // 1 + x/inv_gamma can be <= 0 only where x <= 0, which where() below replaces by 0.
    const torch::Tensor warm = 1.0 - torch::pow(1.0 + x / config_.inv_gamma, -config_.power);
    decay = torch::clamp(warm, config_.min_decay, config_.decay);
  } else {
    decay = torch::full({}, std::max(config_.decay, config_.min_decay), x.options());
  }
  decay = torch::where(x <= 0.0, torch::zeros_like(decay), decay);
  const torch::Tensor due = step.remainder(config_.update_every).eq(0).to(torch::kFloat64);
  return (applied.to(torch::kFloat64) * due * (1.0 - decay)).to(torch::kFloat32);
}

void ShardedEma::update(const torch::Tensor& master_shard, const torch::Tensor& step, const torch::Tensor& applied) {
  ZEST_CHECK(master_shard.numel() == ema_.numel(), "ShardedEma::update: the master shard has ",
             master_shard.numel(), " elements, the EMA ", ema_.numel());
  ZEST_CHECK(step.dim() == 0 && applied.dim() == 0, "ShardedEma::update: step and applied must be 0-dim tensors");
  const torch::NoGradGuard no_grad;
  // ema + w·(master − ema) = ema − (1 − decay)·(ema − master): diffusers' EMAModel.step, in place.
  ema_.lerp_(master_shard, update_weight(step, applied));
}

void ShardedEma::load_shard(const torch::Tensor& values) {
  ZEST_CHECK(values.numel() == ema_.numel(), "ShardedEma::load_shard: ", values.numel(),
             " values for an EMA shard of ", ema_.numel());
  const torch::NoGradGuard no_grad;
  ema_.copy_(values.reshape({-1}));
}

}  // namespace zest
