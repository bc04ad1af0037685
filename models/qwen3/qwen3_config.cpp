// Qwen3Config from config.json (see qwen3_config.h).
#include "models/qwen3/qwen3_config.h"

#include "core/check.h"
#include "core/untrusted_file.h"
#include "formats/json_field.h"
#include "formats/json_text.h"

#include <cmath>

namespace zest::qwen3 {
namespace {

// Bounds far above any released Qwen3 (the 235B model: 94 layers of 4096, vocabulary 151936) that keep every
// product of them inside int64 and a hostile file from asking for an absurd model.
constexpr int64_t kMaxVocab = int64_t{1} << 22;
constexpr int64_t kMaxWidth = int64_t{1} << 16;
constexpr int64_t kMaxIntermediate = int64_t{1} << 18;
constexpr int64_t kMaxLayers = 1024;
constexpr int64_t kMaxHeads = 1024;
constexpr int64_t kMaxHeadDim = 1024;
constexpr int64_t kMaxPositions = int64_t{1} << 24;

// Absent or null (transformers' None): the default.
void read_int(const JsonField& config, const char* key, int64_t min, int64_t max, int64_t& out) {
  out = config.at(key).null_as_absent().integer_or(out, min, max);
}

void read_bool(const JsonField& config, const char* key, bool& out) {
  out = config.at(key).null_as_absent().boolean_or(out);
}

double positive_number(const JsonField& field, double max) { return field.number(NumberRange::above_up_to(0, max)); }

// RoPE: plain rotary embeddings only. transformers 4 writes rope_theta + rope_scaling (null), 5 writes
// rope_parameters {"rope_type": "default", "rope_theta": ...}.
void read_rope(const JsonField& config, Qwen3Config& out) {
  if (config.at("rope_theta").null_as_absent().exists()) out.rope_theta = positive_number(config.at("rope_theta"), 1e12);
  for (const char* key : {"rope_scaling", "rope_parameters"}) {
    if (!config.at(key).null_as_absent().exists()) continue;
    const JsonField rope = config.at(key);
    rope.object();
    for (const char* type_key : {"rope_type", "type"}) {
      if (!rope.has(type_key)) continue;
      const std::string type = rope.at(type_key).string();
      if (type != "default") {
        rope.at(type_key).fail(str("is \"", type, "\"; zest's Qwen3 has plain rotary embeddings (\"default\") only"));
      }
    }
    if (rope.has("rope_theta")) out.rope_theta = positive_number(rope.at("rope_theta"), 1e12);
  }
}

}  // namespace

int64_t Qwen3Config::parameter_count() const {
  const int64_t q = num_attention_heads * head_dim, kv = num_key_value_heads * head_dim;
  const int64_t attention = hidden_size * q + 2 * hidden_size * kv + q * hidden_size + 2 * head_dim +
                            (attention_bias ? q + 2 * kv + hidden_size : 0);
  const int64_t mlp = 3 * hidden_size * intermediate_size;
  const int64_t layer = attention + mlp + 2 * hidden_size;
  return vocab_size * hidden_size + num_hidden_layers * layer + hidden_size;
}

Qwen3Config Qwen3Config::from_json_text(const std::string& text, const std::string& path) {
  const Json document = parse_ordered_json(text, path);
  const JsonField config(document, path);
  config.object();
  if (config.has("model_type")) {
    const std::string type = config.at("model_type").string();
    if (type != "qwen3") {
      config.at("model_type").fail(str("is \"", type, "\"; expected \"qwen3\" (a Qwen3 model folder's config.json)"));
    }
  }
  Qwen3Config out;
  read_int(config, "vocab_size", 1, kMaxVocab, out.vocab_size);
  read_int(config, "hidden_size", 1, kMaxWidth, out.hidden_size);
  read_int(config, "intermediate_size", 1, kMaxIntermediate, out.intermediate_size);
  read_int(config, "num_hidden_layers", 1, kMaxLayers, out.num_hidden_layers);
  read_int(config, "num_attention_heads", 1, kMaxHeads, out.num_attention_heads);
  out.num_key_value_heads = out.num_attention_heads;  // transformers' default when the field is absent
  read_int(config, "num_key_value_heads", 1, kMaxHeads, out.num_key_value_heads);
  out.head_dim = out.hidden_size / out.num_attention_heads;
  read_int(config, "head_dim", 1, kMaxHeadDim, out.head_dim);
  read_int(config, "max_position_embeddings", 1, kMaxPositions, out.max_position_embeddings);
  if (config.has("rms_norm_eps")) out.rms_norm_eps = positive_number(config.at("rms_norm_eps"), 1.0);
  read_bool(config, "attention_bias", out.attention_bias);
  read_bool(config, "tie_word_embeddings", out.tie_word_embeddings);
  read_rope(config, out);
  if (config.has("hidden_act")) {
    const std::string act = config.at("hidden_act").string();
    if (act != "silu") config.at("hidden_act").fail(str("is \"", act, "\"; Qwen3's MLP is SwiGLU (\"silu\")"));
  }
  bool sliding = false;
  read_bool(config, "use_sliding_window", sliding);
  if (sliding) {
    config.at("use_sliding_window").fail("is true; zest's Qwen3 attends over the whole text (no sliding window)");
  }
  if (out.num_key_value_heads > out.num_attention_heads || out.num_attention_heads % out.num_key_value_heads != 0) {
    config.at("num_key_value_heads")
        .fail(str("is ", out.num_key_value_heads, "; it must divide num_attention_heads (", out.num_attention_heads, ")"));
  }
  if (out.head_dim % 2 != 0)
    config.at("head_dim").fail(str("is ", out.head_dim, "; it must be even (rotary embeddings turn pairs of features)"));
  return out;
}

Qwen3Config Qwen3Config::from_file(const std::string& path) {
  return from_json_text(read_text_file(path, "Qwen3 config.json", 1 << 20), path);
}

}  // namespace zest::qwen3
