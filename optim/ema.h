// EMA of the fp32 master weights, kept sharded like the master (4P/N bytes per rank): the [ema] table
// (EmaConfig, with diffusers' EMAModel decay rule and warm-up form) and ShardedEma, which the engine
// updates after each optimizer pass without reading anything back to the host.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

namespace zest {

class ConfigTable;   // core/config_reader.h
class ConfigWriter;  // core/config_writer.h
template <typename C>
class FieldTable;  // core/field_table.h

// The decay used by the EMA update at optimizer step `step` (updates applied so far, this one
// included), the rule of diffusers' EMAModel.get_decay with optimization_step = step and
// update_after_step = start_step:
//   x = step − start_step − 1
//   x ≤ 0:                 decay = 0 (the EMA copies the weights)
//   use_ema_warmup:        decay = clamp(1 − (1 + x/inv_gamma)^(−power), min_decay, decay)
//   otherwise:             decay = max(decay, min_decay)
// and the update is ema ← ema − (1 − decay)·(ema − master). With update_every = k only steps that are
// multiples of k update the EMA (with that step's decay); skipped (non-finite) steps never do.
struct EmaConfig {
  bool enabled = false;      // an [ema] table turns it on; enabled = false turns it off
  double decay = 0.9999;     // the (maximum) decay
  double min_decay = 0.0;    // floor of the decay once averaging has started
  int64_t update_every = 1;  // optimizer steps between EMA updates
  int64_t start_step = 0;    // the EMA copies the weights up to step start_step + 1, then averages
  bool use_ema_warmup = false;  // diffusers' warm-up form (inv_gamma, power)
  double inv_gamma = 1.0;
  double power = 2.0 / 3.0;

  // A setting outside its range: the key, its value as written and what it must be ("in [0, 1]").
  struct RangeProblem {
    std::string key;
    std::string value;
    std::string expected;
  };
  // Every setting outside its range (the one statement of the ranges: the run file, the engine and a
  // checkpoint's manifest are checked against it).
  std::vector<RangeProblem> range_problems() const;

  // Reads [ema]; `present` says whether the run file has the table at all (absent = off).
  // inv_gamma/power are refused without use_ema_warmup (they would change nothing).
  static EmaConfig from_toml(ConfigTable& table, bool present);
  // Throws naming the first setting outside its range.
  void validate() const;
};

void to_toml(const EmaConfig& config, ConfigWriter& out);
// The [ema] table (core/field_table.h); read into a config whose `enabled` says whether the table is present.
const FieldTable<EmaConfig>& ema_fields();

// The decay of the update at optimizer step `step`, computed on the host (the rule above); for tests,
// docs and logs. ShardedEma computes the same thing with tensor ops on the device.
double ema_decay_at(const EmaConfig& config, int64_t step);

class ShardedEma {
 public:
  // Starts as a copy of the master shard ([Σ owned] fp32, on its device).
  ShardedEma(const EmaConfig& config, const torch::Tensor& master_shard);

  // After an optimizer pass. `step`: 0-dim integer tensor on the master's device = optimizer updates
  // applied so far (this one included); `applied`: 0-dim fp32 tensor on that device, 1 when this
  // step's update was applied, 0 when it was skipped (non-finite gradients). Neither is read on the
  // host: the decay and the gating are tensor ops, so the update never waits for the device.
  void update(const torch::Tensor& master_shard, const torch::Tensor& step, const torch::Tensor& applied);

  torch::Tensor shard() const { return ema_; }  // [Σ owned] fp32, same layout as the master shard
  void load_shard(const torch::Tensor& values);  // e.g. from a checkpoint; same numel
  int64_t bytes() const { return ema_.numel() * static_cast<int64_t>(sizeof(float)); }
  const EmaConfig& config() const { return config_; }

 private:
  // Weight w of ema ← ema + w·(master − ema) for this call, as a 0-dim fp32 tensor.
  torch::Tensor update_weight(const torch::Tensor& step, const torch::Tensor& applied) const;

  EmaConfig config_;
  torch::Tensor ema_;
};

}  // namespace zest
