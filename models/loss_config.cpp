// LossConfig: reading and printing the [loss] table (see loss_config.h).
#include "models/loss_config.h"

#include "core/config_reader.h"
#include "core/config_writer.h"

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

LossConfig LossConfig::from_toml(ConfigTable& table) {
  LossConfig c;
  c.source = table.file();
  c.prediction = table.get_choice("prediction", c.prediction, {"auto", "epsilon", "v_prediction", "sample"});
  c.snr_gamma = table.get("snr_gamma", c.snr_gamma);
  c.noise_offset = table.get("noise_offset", c.noise_offset);
  c.rescale_betas_zero_snr = table.get_optional<bool>("rescale_betas_zero_snr");
  c.min_timestep = table.get("min_timestep", c.min_timestep);
  c.max_timestep = table.get_optional<int64_t>("max_timestep");
  c.min_time = table.get("min_time", c.min_time);
  c.max_time = table.get("max_time", c.max_time);
  table.reject_unknown_keys(kLossHints);

  if (!std::isfinite(c.snr_gamma) || c.snr_gamma < 0) table.fail("snr_gamma", "must be >= 0 (0: off; the paper uses 5)");
  if (!std::isfinite(c.noise_offset) || c.noise_offset < 0) table.fail("noise_offset", "must be >= 0 (0: off; 0.05 to 0.1 is usual)");
  if (c.min_timestep < 0) table.fail("min_timestep", "must be >= 0");
  if (c.max_timestep && *c.max_timestep <= c.min_timestep)
    table.fail("max_timestep", "must be > min_timestep (" + std::to_string(c.min_timestep) + "): timesteps are drawn from [min_timestep, max_timestep)");
  if (!(c.min_time >= 0 && c.min_time < 1)) table.fail("min_time", "must be in [0, 1)");
  if (!(c.max_time > c.min_time && c.max_time <= 1)) table.fail("max_time", "must be in (min_time, 1]");
  return c;
}

void to_toml(const LossConfig& c, ConfigWriter& out) {
  ConfigWriter& t = out.table("loss", "the training objective");
  t.set("prediction", c.prediction, "auto (the pipeline's scheduler prediction_type, else epsilon)|epsilon|v_prediction|sample");
  t.set("snr_gamma", c.snr_gamma, "min-SNR-gamma loss weighting (0: off)");
  t.set("noise_offset", c.noise_offset, "offset noise strength (0: off)");
  if (c.rescale_betas_zero_snr)
    t.set("rescale_betas_zero_snr", *c.rescale_betas_zero_snr, "zero terminal SNR (absent: the pipeline's scheduler config)");
  t.set("min_timestep", c.min_timestep, "diffusion timesteps drawn from [min_timestep, max_timestep)");
  if (c.max_timestep) t.set("max_timestep", *c.max_timestep, "absent: the schedule's num_train_timesteps");
  t.set("min_time", c.min_time, "HY-Motion: flow times drawn from [min_time, max_time)");
  t.set("max_time", c.max_time, "HY-Motion: end of the flow-time range");
}

}  // namespace zest
