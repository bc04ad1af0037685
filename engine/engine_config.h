// EngineConfig: the [engine] table (stage, precision, accumulation, clipping, buckets, activation
// checkpointing) and [engine.loss_scale], with their TOML reading/validation and printing.
#pragma once

#include <torch/torch.h>

#include <string>

namespace zest {

class ConfigTable;   // engine/config_reader.h
class ConfigWriter;  // engine/config_writer.h

enum class Precision { fp32, bf16, fp16 };
torch::Dtype to_dtype(Precision p);
const char* to_string(Precision p);

// What the fp16 loss scaler does when an overflow happens at the minimum scale.
enum class AtMinScale { warn, error };
const char* to_string(AtMinScale a);

enum class CheckpointPolicy { none, all, every_k };
const char* to_string(CheckpointPolicy p);

struct LossScaleConfig {
  double initial = 65536.0;   // 2^16
  int window = 1000;          // clean steps before the scale doubles
  int hysteresis = 1;         // overflows tolerated before the scale halves (1 = halve on every one)
  double min = 1.0;           // floor
  AtMinScale at_min = AtMinScale::error;
};

struct EngineConfig {
  int stage = 2;                                // 0 (DP), 1, 2 (3: parameters sharded; later)
  Precision precision = Precision::bf16;        // compute dtype of parameters and activations
  Precision reduce_dtype = Precision::fp32;     // dtype gradients are reduced in
  int accumulation_steps = 1;                   // micro-batches per optimizer step
  double clip_norm = 0.0;                       // global grad-norm clip; 0 = off
  double bucket_mb = 25.0;                      // small neighbouring units are fused up to this size
  CheckpointPolicy activation_checkpointing = CheckpointPolicy::none;
  int checkpoint_every = 2;                     // k for every_k
  int max_nonfinite_steps = 5;                  // consecutive skipped (non-finite) steps before the run stops
  int threads = 0;                              // intra-op threads per rank; 0 = cores / local ranks
  LossScaleConfig loss_scale;

  // Reads [engine] and [engine.loss_scale] strictly: wrong types, out-of-range values, unknown keys and
  // inconsistent combinations (e.g. loss_scale without fp16) are errors at the key's file:line:col.
  static EngineConfig from_toml(ConfigTable& table);
};

// Writes every field (defaults included) with its one-line doc; [engine.loss_scale] only for fp16.
void to_toml(const EngineConfig& config, ConfigWriter& out);

}  // namespace zest
