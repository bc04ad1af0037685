// CLIPTextConfig from config.json (see clip_text_config.h).
#include "models/clip/clip_text_config.h"

#include "core/check.h"

namespace zest::clip {
namespace {

// An architecture field in [1, largest]: the bounds lie far above every released CLIP text encoder
// (SDXL's OpenCLIP bigG: 32 layers, width 1280, MLP 5120) and keep a hostile config.json from asking for
// terabytes or an overflowing tensor size before anything is allocated.
void read_positive(const JsonField& config, const char* key, int64_t largest, int64_t& out) {
  out = config.at(key).integer_or(out, 1, largest);
}

}  // namespace

const char* to_string(HiddenAct act) {
  switch (act) {
    case HiddenAct::quick_gelu:
      return "quick_gelu";
    case HiddenAct::gelu:
      return "gelu";
    case HiddenAct::gelu_tanh:
      return "gelu_new";
  }
  return "?";
}

CLIPTextConfig CLIPTextConfig::from_json(const JsonField& config) {
  config.object();
  if (config.has("model_type")) config.at("model_type").one_of({"clip_text_model"});
  CLIPTextConfig out;
  read_positive(config, "vocab_size", 1 << 20, out.vocab_size);
  read_positive(config, "hidden_size", 16384, out.hidden_size);
  read_positive(config, "intermediate_size", 65536, out.intermediate_size);
  read_positive(config, "projection_dim", 16384, out.projection_dim);
  read_positive(config, "num_hidden_layers", 256, out.num_hidden_layers);
  read_positive(config, "num_attention_heads", 1024, out.num_attention_heads);
  read_positive(config, "max_position_embeddings", 16384, out.max_position_embeddings);
  out.eos_token_id = config.at("eos_token_id").integer_or(out.eos_token_id, 0, (int64_t{1} << 31) - 1);
  out.layer_norm_eps = config.at("layer_norm_eps").number_or(out.layer_norm_eps, NumberRange::open(0, 1));
  if (config.has("hidden_act")) {
    const std::string act = config.at("hidden_act").one_of({"quick_gelu", "gelu", "gelu_new", "gelu_pytorch_tanh"});
    out.hidden_act = act == "quick_gelu" ? HiddenAct::quick_gelu : act == "gelu" ? HiddenAct::gelu : HiddenAct::gelu_tanh;
  }
  if (out.hidden_size % out.num_attention_heads != 0) {
    config.at("hidden_size")
        .fail(str("is ", out.hidden_size, ", not a multiple of num_attention_heads (", out.num_attention_heads, ")"));
  }
  return out;
}

}  // namespace zest::clip
