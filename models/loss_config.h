// LossConfig: the run file's [loss] table, the options of a family's training objective (diffusion UNets:
// prediction target, min-SNR-γ weighting, offset noise, zero terminal SNR, timestep range; HY-Motion's flow
// matching: the flow-time range). Read strictly here; each family refuses the options its objective does
// not have, naming the key (ModelFamily::make_training_loss).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace zest {

class ConfigTable;   // core/config_reader.h
class ConfigWriter;  // core/config_writer.h
template <typename C>
class FieldTable;  // core/field_table.h

struct LossConfig {
  std::string source;  // the run file, for the families' messages ("" when built in code)
  // "auto" (the pipeline's scheduler prediction_type, else "epsilon") | "epsilon" | "v_prediction" | "sample"
  std::string prediction = "auto";
  double snr_gamma = 0.0;     // min-SNR-γ weighting; 0: off (diffusers' --snr_gamma, kohya's --min_snr_gamma)
  double noise_offset = 0.0;  // offset noise strength; 0: off (diffusers' --noise_offset)
  std::optional<bool> rescale_betas_zero_snr;  // unset: the pipeline's scheduler config, else false
  int64_t min_timestep = 0;                    // diffusion timesteps drawn from [min_timestep, max_timestep)
  std::optional<int64_t> max_timestep;         // unset: the schedule's num_train_timesteps
  double min_time = 0.0;                       // HY-Motion: flow times drawn from [min_time, max_time)
  double max_time = 1.0;

  // The key's name as messages give it, with the run file: "run.toml: loss.snr_gamma".
  std::string key(const std::string& name) const;

  static LossConfig from_toml(ConfigTable& table);
};

void to_toml(const LossConfig& config, ConfigWriter& out);
const FieldTable<LossConfig>& loss_fields();  // the [loss] table (core/field_table.h)

}  // namespace zest
