// CLIPTextModel / CLIPTextModelWithProjection forward and loading (see clip_text_model.h).
#include "models/clip/clip_text_model.h"

#include "formats/safetensors.h"
#include "core/check.h"
#include "core/untrusted_file.h"
#include "formats/json_text.h"
#include "models/model_memory.h"
#include "models/state_dict.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>
#include <string_view>

namespace zest::clip {
namespace fs = std::filesystem;
namespace {

constexpr int64_t kReleasedEndOfText = 49407;
constexpr std::string_view kTextModelPrefix = "text_model.";
constexpr const char* kPositionIdsBuffer = "text_model.embeddings.position_ids";

torch::Tensor activate(HiddenAct act, const torch::Tensor& x) {
  switch (act) {
    case HiddenAct::quick_gelu:
      return x * torch::sigmoid(1.702 * x);
    case HiddenAct::gelu:
      return torch::gelu(x);
    case HiddenAct::gelu_tanh:
      return torch::gelu(x, "tanh");
  }
  return x;  // unreachable
}

// 0 on and below the diagonal, -inf above: token i attends to tokens 0..i.
torch::Tensor causal_mask(int64_t length, const torch::TensorOptions& options) {
  return torch::full({length, length}, -std::numeric_limits<float>::infinity(), options).triu(1);
}

}  // namespace

torch::Tensor end_token_positions(const torch::Tensor& input_ids, int64_t eos_token_id) {
  ZEST_CHECK(input_ids.dim() == 2 && input_ids.size(1) > 0, "input_ids must be [batch, length], got ",
             input_ids.sizes());
  const bool released_vocabulary = (std::get<0>(input_ids.max(-1)) == kReleasedEndOfText).all().item<bool>();
  if (released_vocabulary || eos_token_id == 2) return input_ids.argmax(-1);
  return (input_ids == eos_token_id).to(torch::kInt).argmax(-1);
}

WeightImpl::WeightImpl(std::vector<int64_t> shape, const torch::TensorOptions& options) {
  weight = register_parameter("weight", torch::zeros(shape, options));
}

CLIPAttentionImpl::CLIPAttentionImpl(const CLIPTextConfig& config, const torch::TensorOptions& options)
    : heads_(config.num_attention_heads), head_dim_(config.head_dim()) {
  const int64_t h = config.hidden_size;
  k_proj = register_module("k_proj", unet::Linear(h, h, true, options));
  v_proj = register_module("v_proj", unet::Linear(h, h, true, options));
  q_proj = register_module("q_proj", unet::Linear(h, h, true, options));
  out_proj = register_module("out_proj", unet::Linear(h, h, true, options));
}

torch::Tensor CLIPAttentionImpl::forward(const torch::Tensor& x, const torch::Tensor& mask) const {
  const int64_t batch = x.size(0), length = x.size(1);
  auto heads = [&](const torch::Tensor& t) { return t.view({batch, length, heads_, head_dim_}).transpose(1, 2); };
  const torch::Tensor q = heads(q_proj->forward(x));
  const torch::Tensor k = heads(k_proj->forward(x));
  const torch::Tensor v = heads(v_proj->forward(x));
  // As transformers' eager attention: scores scaled by 1/sqrt(head_dim), the mask added, softmax in float32.
  const torch::Tensor scores = torch::matmul(q, k.transpose(-1, -2)) * (1.0 / std::sqrt(static_cast<double>(head_dim_)));
  const torch::Tensor weights = torch::softmax(scores.to(torch::kFloat) + mask, -1).to(q.scalar_type());
  const torch::Tensor out = torch::matmul(weights, v).transpose(1, 2).reshape({batch, length, heads_ * head_dim_});
  return out_proj->forward(out);
}

CLIPMLPImpl::CLIPMLPImpl(const CLIPTextConfig& config, const torch::TensorOptions& options) : act_(config.hidden_act) {
  fc1 = register_module("fc1", unet::Linear(config.hidden_size, config.intermediate_size, true, options));
  fc2 = register_module("fc2", unet::Linear(config.intermediate_size, config.hidden_size, true, options));
}

torch::Tensor CLIPMLPImpl::forward(const torch::Tensor& x) const { return fc2->forward(activate(act_, fc1->forward(x))); }

CLIPEncoderLayerImpl::CLIPEncoderLayerImpl(const CLIPTextConfig& config, const torch::TensorOptions& options) {
  self_attn = register_module("self_attn", CLIPAttention(config, options));
  layer_norm1 = register_module("layer_norm1", unet::LayerNorm(config.hidden_size, config.layer_norm_eps, options));
  mlp = register_module("mlp", CLIPMLP(config, options));
  layer_norm2 = register_module("layer_norm2", unet::LayerNorm(config.hidden_size, config.layer_norm_eps, options));
}

torch::Tensor CLIPEncoderLayerImpl::forward(const torch::Tensor& x, const torch::Tensor& mask) const {
  const torch::Tensor h = x + self_attn->forward(layer_norm1->forward(x), mask).to(x.scalar_type());
  return h + mlp->forward(layer_norm2->forward(h)).to(h.scalar_type());
}

CLIPTextEmbeddingsImpl::CLIPTextEmbeddingsImpl(const CLIPTextConfig& config, const torch::TensorOptions& options) {
  token_embedding = register_module("token_embedding", Weight(std::vector<int64_t>{config.vocab_size, config.hidden_size}, options));
  position_embedding = register_module(
      "position_embedding", Weight(std::vector<int64_t>{config.max_position_embeddings, config.hidden_size}, options));
}

torch::Tensor CLIPTextEmbeddingsImpl::forward(const torch::Tensor& input_ids) const {
  const int64_t length = input_ids.size(1);
  const int64_t max_positions = position_embedding->weight.size(0);
  ZEST_CHECK(length <= max_positions, "a CLIP text encoder takes at most ", max_positions, " tokens, got ", length);
  const int64_t vocab = token_embedding->weight.size(0);
  ZEST_CHECK(input_ids.numel() == 0 || (input_ids.min().item<int64_t>() >= 0 && input_ids.max().item<int64_t>() < vocab),
             "token ids must lie in [0, ", vocab, ") for this text encoder's vocabulary");
  return torch::embedding(token_embedding->weight, input_ids) +
         position_embedding->weight.narrow(0, 0, length).unsqueeze(0);
}

CLIPEncoderImpl::CLIPEncoderImpl(const CLIPTextConfig& config, const torch::TensorOptions& options) {
  layers = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < config.num_hidden_layers; ++i) layers->push_back(CLIPEncoderLayer(config, options));
}

CLIPTextTransformerImpl::CLIPTextTransformerImpl(const CLIPTextConfig& config, const torch::TensorOptions& options)
    : eos_token_id_(config.eos_token_id) {
  embeddings = register_module("embeddings", CLIPTextEmbeddings(config, options));
  encoder = register_module("encoder", CLIPEncoder(config, options));
  final_layer_norm = register_module("final_layer_norm", unet::LayerNorm(config.hidden_size, config.layer_norm_eps, options));
}

CLIPTextOutput CLIPTextTransformerImpl::forward(const torch::Tensor& input_ids) const {
  ZEST_CHECK(input_ids.dim() == 2, "input_ids must be [batch, length], got ", input_ids.sizes());
  const torch::Tensor ids = input_ids.to(torch::kLong);
  CLIPTextOutput out;
  torch::Tensor h = embeddings->forward(ids);
  const torch::Tensor mask = causal_mask(ids.size(1), h.options().dtype(torch::kFloat));
  out.hidden_states.push_back(h);
  for (const auto& layer : *encoder->layers) {
    h = layer->as<CLIPEncoderLayerImpl>()->forward(h, mask);
    out.hidden_states.push_back(h);
  }
  out.last_hidden_state = final_layer_norm->forward(h);
  const torch::Tensor positions = end_token_positions(ids, eos_token_id_).to(torch::kLong);
  out.pooled = out.last_hidden_state.index({torch::arange(ids.size(0), positions.options()), positions});
  return out;
}

CLIPTextModelImpl::CLIPTextModelImpl(const CLIPTextConfig& config, bool with_projection,
                                     const torch::TensorOptions& options)
    : config_(config) {
  text_model = register_module("text_model", CLIPTextTransformer(config, options));
  if (with_projection) {
    text_projection = register_module(
        "text_projection", Weight(std::vector<int64_t>{config.projection_dim, config.hidden_size}, options));
  }
}

CLIPTextOutput CLIPTextModelImpl::forward(const torch::Tensor& input_ids) const {
  CLIPTextOutput out = text_model->forward(input_ids);
  if (!text_projection.is_empty()) {
    out.text_embeds = torch::linear(out.pooled.to(text_projection->weight.scalar_type()), text_projection->weight);
  }
  return out;
}

void load_clip_text_weights(CLIPTextModel& model, const safetensors::Reader& reader, const std::string& prefix,
                            const std::string& described_as) {
  // A CLIPTextModel file without any "text_model." tensor fills the text transformer by its own names.
  const std::string prefixed = prefix + std::string(kTextModelPrefix);
  const bool unprefixed = !model->with_projection() &&
                          std::none_of(reader.tensors().begin(), reader.tensors().end(),
                                       [&](const auto& t) { return t.name.rfind(prefixed, 0) == 0; });
  torch::nn::Module& target = unprefixed ? static_cast<torch::nn::Module&>(*model->text_model) : *model;
  const std::string position_ids = std::string(kPositionIdsBuffer).substr(unprefixed ? kTextModelPrefix.size() : 0);
  LoadOptions load;
  load.strict = false;  // checked below, allowing only the position_ids buffer older releases saved
  load.prefix = prefix;
  const LoadReport report = load_state_dict(target, reader, load);
  std::vector<std::string> unexpected;
  for (const std::string& name : report.unexpected) {
    if (name != position_ids) unexpected.push_back(name);
  }
  if (report.missing.empty() && unexpected.empty()) return;
  std::ostringstream message;
  message << reader.path() << ": does not match " << described_as << ":";
  auto list = [&](const char* what, const std::vector<std::string>& names) {
    if (names.empty()) return;
    message << " " << names.size() << " " << what << " (";
    for (size_t i = 0; i < names.size() && i < 5; ++i) message << (i ? ", " : "") << names[i];
    message << (names.size() > 5 ? ", ...)" : ")");
  };
  list("missing", report.missing);
  list("unexpected", unexpected);
  ZEST_FAIL(message.str());
}

namespace {

// A whole CLIPModel's folder (openai/clip-vit-large-patch14, which HY-Motion reads as CLIPTextModel does):
// "text_config" (with the older "text_config_dict" over it, as transformers merges them) and only the
// text_model.* tensors of its weights; the vision tower and projections are passed over.
CLIPTextModel load_text_of_clip_model(const fs::path& folder, const JsonField& config, const nlohmann::ordered_json& document,
                                      const torch::TensorOptions& options) {
  config.at("text_config").object();
  nlohmann::ordered_json text = document.at("text_config");
  if (config.at("text_config_dict").is_object())
    for (const auto& [key, value] : document.at("text_config_dict").items()) text[key] = value;
  text.erase("model_type");
  const CLIPTextConfig text_config = CLIPTextConfig::from_json(JsonField(text, config.file(), "text_config"));
  const std::string config_path = config.file();
  const fs::path weights_path = folder / "model.safetensors";
  ZEST_CHECK(fs::exists(weights_path), weights_path.string(), ": not found; zest reads CLIP weights from model.safetensors");
  CLIPTextModel model(text_config, /*with_projection=*/false, options);
  const safetensors::Reader reader(weights_path.string());
  LoadOptions load;
  load.strict = false;  // keys outside text_model. are the vision tower's; checked below
  load.prefix = std::string(kTextModelPrefix);
  const LoadReport report = load_state_dict(*model->text_model, reader, load);
  std::vector<std::string> unexpected;
  for (const std::string& name : report.unexpected)
    if (std::string(kTextModelPrefix) + name != kPositionIdsBuffer) unexpected.push_back(name);
  if (!report.missing.empty() || !unexpected.empty()) {
    ZEST_FAIL(weights_path.string(), ": does not match the CLIP text model of ", config_path, ": ", report.missing.size(),
              " missing (", report.missing.empty() ? std::string() : report.missing.front(), "), ", unexpected.size(),
              " unexpected (", unexpected.empty() ? std::string() : unexpected.front(), ") under text_model.");
  }
  return model;
}

}  // namespace

CLIPTextModel load_clip_text_model(const fs::path& folder, const torch::TensorOptions& options) {
  const fs::path config_path = folder / "config.json";
  const std::string source = printable(config_path.string());
  const nlohmann::ordered_json document = read_json_file(config_path.string(), "text encoder config (config.json)");
  const JsonField config(document, source);
  config.object();
  if (config.at("model_type").is_string() && config.at("model_type").string() == "clip")
    return load_text_of_clip_model(folder, config, document, options);
  const CLIPTextConfig text_config = CLIPTextConfig::from_json(config);
  bool with_projection = false;
  if (config.has("architectures")) {
    const JsonField architectures = config.at("architectures");
    const char* known = "[\"CLIPTextModel\"] or [\"CLIPTextModelWithProjection\"]";
    if (!architectures.is_array() || architectures.size() != 1) architectures.expected(known);
    with_projection = architectures.items()[0].one_of({"CLIPTextModel", "CLIPTextModelWithProjection"}) ==
                      "CLIPTextModelWithProjection";
  }
  check_module_fits_host(
      source,
      str("vocab_size = ", text_config.vocab_size, ", hidden_size = ", text_config.hidden_size, ", intermediate_size = ",
          text_config.intermediate_size, ", num_hidden_layers = ", text_config.num_hidden_layers),
      *CLIPTextModel(text_config, with_projection, torch::TensorOptions().device(torch::kMeta)),
      static_cast<int64_t>(options.dtype().itemsize()));
  const fs::path weights_path = folder / "model.safetensors";
  if (!fs::exists(weights_path)) {
    ZEST_FAIL(weights_path.string(), ": not found; zest reads text encoder weights from model.safetensors (for a "
              "variant such as model.fp16.safetensors, point a copy or link of that name at it)");
  }
  CLIPTextModel model(text_config, with_projection, options);
  load_clip_text_weights(model, safetensors::Reader(weights_path.string()), "",
                         str(with_projection ? "CLIPTextModelWithProjection" : "CLIPTextModel", " of ",
                             config_path.string()));
  return model;
}

}  // namespace zest::clip
