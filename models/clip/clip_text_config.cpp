// CLIPTextConfig from config.json (see clip_text_config.h).
#include "models/clip/clip_text_config.h"

#include "core/check.h"
#include "formats/json_text.h"

namespace zest::clip {
namespace {

// An architecture field in [1, largest]: the bounds lie far above every released CLIP text encoder
// (SDXL's OpenCLIP bigG: 32 layers, width 1280, MLP 5120) and keep a hostile config.json from asking for
// terabytes or an overflowing tensor size before anything is allocated.
void read_positive(const nlohmann::json& config, const char* key, const std::string& path, int64_t largest,
                   int64_t& out) {
  if (!config.contains(key)) return;
  const nlohmann::json& value = config[key];
  if (value.is_number_unsigned() && value.get<uint64_t>() > static_cast<uint64_t>(largest))
    ZEST_FAIL(path, ": \"", key, "\" is ", value.get<uint64_t>(), "; the largest value zest accepts is ", largest);
  if (!value.is_number_integer() || value.get<int64_t>() <= 0)
    ZEST_FAIL(path, ": \"", key, "\" is ", json_excerpt(value), "; expected a positive integer");
  out = value.get<int64_t>();
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

CLIPTextConfig CLIPTextConfig::from_json(const nlohmann::json& config, const std::string& path) {
  if (!config.is_object()) ZEST_FAIL(path, ": expected a JSON object of CLIPTextConfig fields");
  if (config.contains("model_type") && config["model_type"] != "clip_text_model") {
    ZEST_FAIL(path, ": \"model_type\" is ", json_excerpt(config["model_type"]),
              "; expected \"clip_text_model\" (a CLIP text encoder's config.json)");
  }
  CLIPTextConfig out;
  read_positive(config, "vocab_size", path, 1 << 20, out.vocab_size);
  read_positive(config, "hidden_size", path, 16384, out.hidden_size);
  read_positive(config, "intermediate_size", path, 65536, out.intermediate_size);
  read_positive(config, "projection_dim", path, 16384, out.projection_dim);
  read_positive(config, "num_hidden_layers", path, 256, out.num_hidden_layers);
  read_positive(config, "num_attention_heads", path, 1024, out.num_attention_heads);
  read_positive(config, "max_position_embeddings", path, 16384, out.max_position_embeddings);
  if (config.contains("eos_token_id")) {
    const nlohmann::json& value = config["eos_token_id"];
    if (!value.is_number_integer() || value.get<int64_t>() < 0 || value.get<int64_t>() >= (int64_t{1} << 31)) {
      ZEST_FAIL(path, ": \"eos_token_id\" is ", json_excerpt(value), "; expected a token id");
    }
    out.eos_token_id = value.get<int64_t>();
  }
  if (config.contains("layer_norm_eps")) {
    const nlohmann::json& value = config["layer_norm_eps"];
    if (!value.is_number() || !(value.get<double>() > 0 && value.get<double>() < 1)) {
      ZEST_FAIL(path, ": \"layer_norm_eps\" is ", json_excerpt(value), "; expected a positive number below 1");
    }
    out.layer_norm_eps = value.get<double>();
  }
  if (config.contains("hidden_act")) {
    const nlohmann::json& value = config["hidden_act"];
    const std::string act = value.is_string() ? value.get<std::string>() : "";
    if (act == "quick_gelu") {
      out.hidden_act = HiddenAct::quick_gelu;
    } else if (act == "gelu") {
      out.hidden_act = HiddenAct::gelu;
    } else if (act == "gelu_new" || act == "gelu_pytorch_tanh") {
      out.hidden_act = HiddenAct::gelu_tanh;
    } else {
      ZEST_FAIL(path, ": \"hidden_act\" is ", json_excerpt(value),
                "; expected \"quick_gelu\", \"gelu\", \"gelu_new\" or \"gelu_pytorch_tanh\"");
    }
  }
  if (out.hidden_size % out.num_attention_heads != 0) {
    ZEST_FAIL(path, ": \"hidden_size\" ", out.hidden_size, " is not a multiple of \"num_attention_heads\" ",
              out.num_attention_heads);
  }
  return out;
}

}  // namespace zest::clip
