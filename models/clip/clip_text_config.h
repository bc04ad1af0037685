// transformers' CLIPTextConfig as zest reads it from a pipeline folder's text_encoder/config.json: the
// fields that shape CLIPTextModel / CLIPTextModelWithProjection, with transformers' defaults.
#pragma once

#include "formats/json_field.h"

#include <cstdint>
#include <string>

namespace zest::clip {

enum class HiddenAct { quick_gelu, gelu, gelu_tanh };

struct CLIPTextConfig {
  int64_t vocab_size = 49408;
  int64_t hidden_size = 512;
  int64_t intermediate_size = 2048;
  int64_t projection_dim = 512;  // CLIPTextModelWithProjection's text_projection output
  int64_t num_hidden_layers = 12;
  int64_t num_attention_heads = 8;
  int64_t max_position_embeddings = 77;
  HiddenAct hidden_act = HiddenAct::quick_gelu;
  double layer_norm_eps = 1e-5;
  // Released SD configurations still say 2 (the value before transformers fixed it); the pooled-output
  // rule (clip_text_model.h) copes with both.
  int64_t eos_token_id = 49407;

  int64_t head_dim() const { return hidden_size / num_attention_heads; }

  // Reads a config.json object; a field of the wrong type or value is an error naming the file and the
  // field (formats/json_field.h). Bookkeeping fields (architectures, torch_dtype, dropout, ...) are
  // ignored, as transformers does.
  static CLIPTextConfig from_json(const JsonField& config);
  static CLIPTextConfig from_json(const nlohmann::json& config, const std::string& path) {
    return from_json(JsonField(config, path));
  }
};

const char* to_string(HiddenAct act);

}  // namespace zest::clip
