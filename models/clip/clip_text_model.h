// transformers' CLIPTextModel and CLIPTextModelWithProjection (the text encoders of SD1.5 and SDXL) under
// the reference state-dict names: token + position embeddings, causal pre-norm encoder layers, final
// layer norm, the pooled end-token state and, with projection, text_projection.
#pragma once

#include "models/clip/clip_text_config.h"
#include "models/unet/layers.h"

#include <torch/torch.h>

#include <filesystem>
#include <string>
#include <vector>

namespace zest::safetensors {
class Reader;  // formats/safetensors.h
}

namespace zest::clip {

struct CLIPTextOutput {
  torch::Tensor last_hidden_state;           // [B, T, hidden], after final_layer_norm
  std::vector<torch::Tensor> hidden_states;  // num_hidden_layers + 1: the embeddings, then each layer's output
  torch::Tensor pooled;                      // [B, hidden]: last_hidden_state at the end token
  torch::Tensor text_embeds;                 // [B, projection_dim]: text_projection(pooled); undefined without it

  // hidden_states[-2], what SDXL feeds the UNet (before the final layer norm).
  const torch::Tensor& penultimate() const { return hidden_states[hidden_states.size() - 2]; }
};

// The position of each row's end token, as transformers picks it: when every row's largest id is 49407
// (the released vocabulary's <|endoftext|>), or for configurations that still say eos_token_id = 2, the
// first largest id (argmax); otherwise the first position holding eos_token_id.
torch::Tensor end_token_positions(const torch::Tensor& input_ids, int64_t eos_token_id);

class CLIPAttentionImpl : public torch::nn::Module {
 public:
  CLIPAttentionImpl(const CLIPTextConfig& config, const torch::TensorOptions& options);
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& causal_mask) const;

  unet::Linear k_proj{nullptr}, v_proj{nullptr}, q_proj{nullptr}, out_proj{nullptr};

 private:
  int64_t heads_, head_dim_;
};
TORCH_MODULE(CLIPAttention);

class CLIPMLPImpl : public torch::nn::Module {
 public:
  CLIPMLPImpl(const CLIPTextConfig& config, const torch::TensorOptions& options);
  torch::Tensor forward(const torch::Tensor& x) const;

  unet::Linear fc1{nullptr}, fc2{nullptr};

 private:
  HiddenAct act_;
};
TORCH_MODULE(CLIPMLP);

class CLIPEncoderLayerImpl : public torch::nn::Module {
 public:
  CLIPEncoderLayerImpl(const CLIPTextConfig& config, const torch::TensorOptions& options);
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& causal_mask) const;

  CLIPAttention self_attn{nullptr};
  unet::LayerNorm layer_norm1{nullptr};
  CLIPMLP mlp{nullptr};
  unet::LayerNorm layer_norm2{nullptr};
};
TORCH_MODULE(CLIPEncoderLayer);

// A module holding one tensor named "weight" (an embedding table, the bias-free text_projection).
class WeightImpl : public torch::nn::Module {
 public:
  WeightImpl(std::vector<int64_t> shape, const torch::TensorOptions& options);
  torch::Tensor weight;
};
TORCH_MODULE(Weight);

class CLIPTextEmbeddingsImpl : public torch::nn::Module {
 public:
  CLIPTextEmbeddingsImpl(const CLIPTextConfig& config, const torch::TensorOptions& options);
  torch::Tensor forward(const torch::Tensor& input_ids) const;

  Weight token_embedding{nullptr};     // [vocab, hidden]
  Weight position_embedding{nullptr};  // [max_positions, hidden]
};
TORCH_MODULE(CLIPTextEmbeddings);

class CLIPEncoderImpl : public torch::nn::Module {
 public:
  CLIPEncoderImpl(const CLIPTextConfig& config, const torch::TensorOptions& options);
  torch::nn::ModuleList layers{nullptr};  // of CLIPEncoderLayer
};
TORCH_MODULE(CLIPEncoder);

class CLIPTextTransformerImpl : public torch::nn::Module {
 public:
  CLIPTextTransformerImpl(const CLIPTextConfig& config, const torch::TensorOptions& options);
  CLIPTextOutput forward(const torch::Tensor& input_ids) const;

  CLIPTextEmbeddings embeddings{nullptr};
  CLIPEncoder encoder{nullptr};
  unet::LayerNorm final_layer_norm{nullptr};

 private:
  int64_t eos_token_id_;
};
TORCH_MODULE(CLIPTextTransformer);

// CLIPTextModel (with_projection false) or CLIPTextModelWithProjection: "text_model." + the transformer,
// and "text_projection.weight" [projection_dim, hidden] (no bias) with projection.
class CLIPTextModelImpl : public torch::nn::Module {
 public:
  CLIPTextModelImpl(const CLIPTextConfig& config, bool with_projection, const torch::TensorOptions& options = {});
  // input_ids [B, T] int64 with T <= max_position_embeddings; no padding mask, as the SD pipelines call it.
  CLIPTextOutput forward(const torch::Tensor& input_ids) const;

  const CLIPTextConfig& config() const { return config_; }
  bool with_projection() const { return !text_projection.is_empty(); }

  CLIPTextTransformer text_model{nullptr};
  Weight text_projection{nullptr};  // [projection_dim, hidden]; null without projection

 private:
  CLIPTextConfig config_;
};
TORCH_MODULE(CLIPTextModel);

// Copies the file's tensors named `prefix` + state-dict name into `model`, strictly by name (the
// position_ids buffer older transformers saved is accepted and ignored). Either naming loads: released
// folders and transformers 4 put the text transformer under "text_model.", transformers 5's
// save_pretrained of a CLIPTextModel leaves that out (its CLIPTextModelWithProjection keeps it). A
// mismatch throws naming the file, `described_as` and the first missing and unexpected names.
void load_clip_text_weights(CLIPTextModel& model, const safetensors::Reader& reader, const std::string& prefix,
                            const std::string& described_as);

// A pipeline folder's text_encoder/ or text_encoder_2/: config.json and model.safetensors, loaded by
// load_clip_text_weights. with_projection follows config.json's "architectures"
// (CLIPTextModelWithProjection) unless the folder says nothing. A whole CLIPModel's folder (model_type "clip",
// e.g. openai/clip-vit-large-patch14) gives its text model: text_config and the text_model.* tensors.
CLIPTextModel load_clip_text_model(const std::filesystem::path& folder, const torch::TensorOptions& options = {});

}  // namespace zest::clip
