// transformers' Qwen3Config as zest reads it from a model folder's config.json: the fields that shape the
// decoder stack (Qwen3-8B: 36 layers of 4096, 32 query and 8 key/value heads of 128), each range-checked.
#pragma once

#include <cstdint>
#include <string>

namespace zest::qwen3 {

struct Qwen3Config {
  int64_t vocab_size = 151936;
  int64_t hidden_size = 4096;
  int64_t intermediate_size = 22016;
  int64_t num_hidden_layers = 32;
  int64_t num_attention_heads = 32;
  int64_t num_key_value_heads = 32;  // grouped-query attention: each key/value head serves heads/kv queries
  int64_t head_dim = 128;            // Qwen3 sets it apart from hidden_size / heads
  int64_t max_position_embeddings = 32768;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  bool attention_bias = false;
  bool tie_word_embeddings = false;  // only says whether lm_head.weight is stored; the encoder never reads it

  int64_t parameter_count() const;  // the decoder stack (embeddings, layers, final norm): what zest loads

  // Reads config.json's object (transformers 4's "rope_theta" or 5's "rope_parameters"); every architecture
  // field is checked for its type and range, and fields of another architecture (sliding windows, RoPE
  // scaling, an activation other than SiLU) are refused: each error names `path`, the field and what was
  // expected. Bookkeeping fields (architectures, dtype, token ids, ...) are ignored, as transformers does.
  static Qwen3Config from_json_text(const std::string& text, const std::string& path);
  static Qwen3Config from_file(const std::string& path);
};

}  // namespace zest::qwen3
