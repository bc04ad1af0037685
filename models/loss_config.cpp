// LossConfig: reading and printing the [loss] table (see loss_config.h).
#include "models/loss_config.h"

#include "core/config_reader.h"
#include "core/config_writer.h"
#include "core/field_table.h"

#include <cmath>

namespace zest {
namespace {

// The training scripts' spellings of the same settings.
const std::map<std::string, std::string> kLossHints = {
    {"prediction_type", "zest calls it prediction"},
    {"min_snr_gamma", "zest calls it snr_gamma (kohya's min_snr_gamma)"},
    {"offset_noise", "zest calls it noise_offset"},
    {"zero_terminal_snr", "zest calls it rescale_betas_zero_snr"},
};

}  // namespace

std::string LossConfig::key(const std::string& name) const {
  return (source.empty() ? "" : source + ": ") + "loss." + name;
}

const FieldTable<LossConfig>& loss_fields() {
  static const FieldTable<LossConfig> table = [] {
    using C = LossConfig;
    FieldTable<C> t("loss", "the training objective", kLossHints);
    t.choice("prediction", &C::prediction, {"auto", "epsilon", "v_prediction", "sample"},
             "auto (the pipeline's scheduler prediction_type, else epsilon)|epsilon|v_prediction|sample")
        .reference("what the UNet is trained to predict: the noise, the velocity v = √ᾱ·ε − √(1−ᾱ)·x₀ (SD 2.x 768-v "
                   "models) or the clean latents; auto = the pipeline's `scheduler/scheduler_config.json` "
                   "`prediction_type` (epsilon without one). UNets only (see \"The training objective\" below)");
    t.number("snr_gamma", &C::snr_gamma, "min-SNR-gamma loss weighting (0: off)")
        .at_least(0, "must be >= 0 (0: off; the paper uses 5)")
        .reference("min-SNR-γ loss weighting (diffusers' `--snr_gamma`, kohya's `--min_snr_gamma`; 5 is the paper's): "
                   "per-sample weights min(SNR, γ)/SNR (epsilon), min(SNR, γ)/(SNR + 1) (v_prediction), min(SNR, γ) "
                   "(sample); 0 = off. UNets only");
    t.number("noise_offset", &C::noise_offset, "offset noise strength (0: off)")
        .at_least(0, "must be >= 0 (0: off; 0.05 to 0.1 is usual)")
        .reference("offset noise (diffusers' `--noise_offset`): ε += noise_offset · N(0, 1) of shape [B, C, 1, 1]; 0 "
                   "= off. UNets only");
    t.optional("rescale_betas_zero_snr", &C::rescale_betas_zero_snr,
               "zero terminal SNR (absent: the pipeline's scheduler config)")
        .default_text("the pipeline's scheduler config (false without one)")
        .reference("rescale the betas to zero terminal SNR (diffusers' `rescale_zero_terminal_snr`); meant for "
                   "v_prediction; sampling then needs the pipeline's scheduler config to say the same (below). UNets "
                   "only");
    t.integer("min_timestep", &C::min_timestep, "diffusion timesteps drawn from [min_timestep, max_timestep)")
        .at_least(0, "must be >= 0")
        .reference("training timesteps are drawn uniformly from [min_timestep, max_timestep) (kohya's "
                   "`--min_timestep`). UNets only");
    t.optional("max_timestep", &C::max_timestep, "absent: the schedule's num_train_timesteps")
        .check([](const C& c) { return !c.max_timestep || *c.max_timestep > c.min_timestep; },
               [](const C& c) {
                 return "must be > min_timestep (" + std::to_string(c.min_timestep) +
                        "): timesteps are drawn from [min_timestep, max_timestep)";
               })
        .type("int > min_timestep")
        .default_text("num_train_timesteps")
        .reference("end of that range, exclusive, at most the schedule's num_train_timesteps (kohya's "
                   "`--max_timestep`). UNets only");
    t.number("min_time", &C::min_time, "HY-Motion: flow times drawn from [min_time, max_time)")
        .check_value([](double v) { return v >= 0 && v < 1; }, "must be in [0, 1)")
        .type("float in [0, 1)")
        .reference("HY-Motion only: flow times t (0 = noise, 1 = data) are drawn from [min_time, max_time)");
    t.number("max_time", &C::max_time, "HY-Motion: end of the flow-time range")
        .check([](const C& c) { return c.max_time > c.min_time && c.max_time <= 1; }, "must be in (min_time, 1]")
        .type("float in (min_time, 1]")
        .reference("HY-Motion only: end of that range");
    // Not a key: the run file, for the families' messages.
    t.rules([](ConfigTable& table, C& c) { c.source = table.file(); });
    return t;
  }();
  return table;
}

LossConfig LossConfig::from_toml(ConfigTable& table) { return loss_fields().read(table); }

void to_toml(const LossConfig& c, ConfigWriter& out) { loss_fields().write(c, out); }

}  // namespace zest
