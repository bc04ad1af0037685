// HyMotionConfig: the constructor arguments of the reference HunyuanMotionMMDiT (HY-Motion 1.0), read
// from a TOML table whose keys are the reference's own field names; unsupported values are refused.
#pragma once

#include "core/config_reader.h"

#include <cstdint>
#include <string>

namespace zest::hymotion {

// Activations the reference's get_activation_layer knows.
enum class Act { gelu, gelu_tanh, relu, silu };
// Per-head q/k normalisation (reference get_norm_layer: "rms" = its RMSNorm, "layer" = affine LayerNorm).
enum class QkNorm { rms, layer, none };
// Motion→motion part of the attention mask ("none" stands for the reference's None).
enum class MaskMode { none, causal, narrowband };

Act parse_act(const std::string& name);
QkNorm parse_qk_norm(const std::string& name);

// text_refiner_cfg (SingleTokenRefiner). input_dim/feat_dim/num_heads come from the main config.
struct RefinerConfig {
  bool enabled = true;  // text_refiner_module != ""
  int64_t num_layers = 2;
  double mlp_ratio = 4.0;
  Act mlp_act = Act::silu;
  QkNorm qk_norm = QkNorm::layer;
  bool qkv_bias = true;
};

// final_layer_cfg (FinalLayer).
struct FinalLayerConfig {
  Act act = Act::silu;  // the modulation's activation
  bool zero_init = false;
};

struct HyMotionConfig {
  int64_t input_dim = 0;
  int64_t feat_dim = 0;
  int64_t output_dim = 0;  // reference: output_dim or input_dim
  int64_t ctxt_input_dim = 4096;
  int64_t vtxt_input_dim = 256;
  RefinerConfig refiner;
  int64_t num_layers = 12;  // num_layers/3 double blocks, the rest single blocks
  int64_t num_heads = 16;
  double mlp_ratio = 4.0;
  Act mlp_act = Act::gelu_tanh;
  QkNorm qk_norm = QkNorm::rms;
  bool qkv_bias = true;
  FinalLayerConfig final_layer;
  MaskMode mask_mode = MaskMode::none;
  bool apply_rope_to_single_branch = true;
  double time_factor = 1.0;
  double narrowband_length = 2.0;  // seconds at 30 fps

  int64_t head_dim() const { return feat_dim / num_heads; }
  int64_t mlp_hidden() const { return static_cast<int64_t>(static_cast<double>(feat_dim) * mlp_ratio); }
  int64_t refiner_mlp_hidden() const {
    return static_cast<int64_t>(static_cast<double>(feat_dim) * refiner.mlp_ratio);
  }
  int64_t num_double_blocks() const { return num_layers / 3; }
  int64_t num_single_blocks() const { return num_layers - num_layers / 3; }
  // Narrow-band half width in frames: Python's int(round(narrowband_length * 30)) (ties to even).
  int64_t narrowband_window() const;

  // Reads every reference field; unknown keys and unsupported values are errors naming the key.
  static HyMotionConfig from_toml(ConfigTable& table);
  // Structural checks (divisibility, positive sizes); throws naming the field.
  void validate() const;
};

}  // namespace zest::hymotion
