// Tiny random HY-Motion text-encoder folders for the tests that need no transformers: a Qwen3-8B/ (config.json,
// random weights under Qwen3ForCausalLM's names, a byte-level BPE tokenizer.json laid out as Qwen's with a few
// merges and Qwen's chat tokens) and a clip-vit-large-patch14/ (a whole CLIPModel's config and weights, the
// tokenizer of tests/data/sd_tiny), of chosen widths.
#pragma once

#include "formats/safetensors.h"
#include "models/clip/clip_text_model.h"
#include "models/qwen3/byte_level_bpe.h"
#include "models/qwen3/qwen3_model.h"
#include "models/qwen3/qwen_pretokenize.h"

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace zest::hytext::test {

inline const std::vector<std::pair<std::string, std::string>>& tiny_merges() {
  static const std::vector<std::pair<std::string, std::string>> merges = {
      {"Ġ", "a"}, {"e", "r"}, {"Ġ", "w"}, {"Ġa", "n"}, {"Ġan", "d"}, {"a", "l"}, {"Ġw", "al"}, {"Ġwal", "k"},
      {"i", "n"}, {"Ġ", "t"}, {"h", "e"}, {"Ġt", "he"}, {"o", "n"}, {"Ċ", "Ċ"}, {"Ġ", "Ġ"}, {"s", "t"}};
  return merges;
}

// tokenizer.json: vocabulary = the 256 byte symbols (ids 0..255), then one token per merge; added tokens
// <|endoftext|>, <|im_start|>, <|im_end|> after it (as Qwen numbers them after its vocabulary).
inline nlohmann::json tiny_qwen_tokenizer_json() {
  nlohmann::json vocab = nlohmann::json::object();
  int64_t id = 0;
  for (int b = 0; b < 256; ++b) vocab[qwen3::byte_symbol(static_cast<uint8_t>(b))] = id++;
  nlohmann::json merges = nlohmann::json::array();
  for (const auto& [a, b] : tiny_merges()) {
    vocab[a + b] = id++;
    merges.push_back({a, b});
  }
  nlohmann::json added = nlohmann::json::array();
  for (const char* token : {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}) {
    added.push_back({{"id", id++}, {"content", token}, {"single_word", false}, {"lstrip", false}, {"rstrip", false},
                     {"normalized", false}, {"special", true}});
  }
  return {{"version", "1.0"},
          {"added_tokens", added},
          {"normalizer", {{"type", "NFC"}}},
          {"pre_tokenizer",
           {{"type", "Sequence"},
            {"pretokenizers",
             {{{"type", "Split"}, {"pattern", {{"Regex", qwen3::kQwenSplitPattern}}}, {"behavior", "Isolated"}, {"invert", false}},
              {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}}}}}},
          {"model",
           {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", ""},
            {"end_of_word_suffix", ""}, {"fuse_unk", false}, {"byte_fallback", false}, {"ignore_merges", false},
            {"vocab", vocab}, {"merges", merges}}}};
}

inline void write_json(const std::filesystem::path& path, const nlohmann::json& value) {
  std::ofstream(path) << value.dump(2) << "\n";
}

// Random values for a freshly built module: weights N(0, 0.2²), norm weights 1 + N(0, 0.1²).
inline void randomise(torch::nn::Module& module, uint64_t seed) {
  torch::manual_seed(seed);
  torch::NoGradGuard no_grad;
  for (auto& item : module.named_parameters()) {
    const bool norm = item.key().find("norm") != std::string::npos;
    item.value().copy_(norm ? 1 + 0.1 * torch::randn(item.value().sizes()) : 0.2 * torch::randn(item.value().sizes()));
  }
}

inline void write_tiny_qwen(const std::filesystem::path& dir, int64_t hidden, uint64_t seed, int64_t layers = 1) {
  std::filesystem::create_directories(dir);
  const nlohmann::json tokenizer = tiny_qwen_tokenizer_json();
  write_json(dir / "tokenizer.json", tokenizer);
  write_json(dir / "tokenizer_config.json", {{"pad_token", "<|endoftext|>"}, {"eos_token", "<|im_end|>"},
                                             {"tokenizer_class", "Qwen2Tokenizer"}});
  qwen3::Qwen3Config c;
  c.vocab_size = 288;
  c.hidden_size = hidden;
  c.intermediate_size = 2 * hidden;
  c.num_hidden_layers = layers;
  c.num_attention_heads = 2;
  c.num_key_value_heads = 1;
  c.head_dim = 8;
  c.max_position_embeddings = 2048;
  c.rope_theta = 1e6;
  write_json(dir / "config.json",
             {{"architectures", {"Qwen3ForCausalLM"}}, {"model_type", "qwen3"}, {"vocab_size", c.vocab_size},
              {"hidden_size", c.hidden_size}, {"intermediate_size", c.intermediate_size},
              {"num_hidden_layers", c.num_hidden_layers}, {"num_attention_heads", c.num_attention_heads},
              {"num_key_value_heads", c.num_key_value_heads}, {"head_dim", c.head_dim}, {"hidden_act", "silu"},
              {"max_position_embeddings", c.max_position_embeddings}, {"rms_norm_eps", 1e-6}, {"rope_theta", 1e6},
              {"rope_scaling", nullptr}, {"tie_word_embeddings", false}, {"use_sliding_window", false},
              {"torch_dtype", "bfloat16"}});
  qwen3::Qwen3Model model(c);
  randomise(*model, seed);
  safetensors::NamedTensors stored;
  for (const auto& item : model->named_parameters()) stored.emplace_back("model." + item.key(), item.value().to(torch::kBFloat16));
  stored.emplace_back("lm_head.weight", torch::zeros({c.vocab_size, hidden}, torch::kBFloat16));
  safetensors::save_file((dir / "model.safetensors").string(), stored, {{"format", "pt"}});
}

inline void write_tiny_clip_l(const std::filesystem::path& dir, int64_t hidden, uint64_t seed) {
  std::filesystem::create_directories(dir);
  const std::filesystem::path tokenizer = std::filesystem::path(ZEST_TEST_DATA) / "sd_tiny" / "sd15" / "tokenizer";
  for (const char* name : {"vocab.json", "merges.txt", "tokenizer_config.json"})
    std::filesystem::copy_file(tokenizer / name, dir / name, std::filesystem::copy_options::overwrite_existing);
  const nlohmann::json text = {{"vocab_size", 814}, {"hidden_size", hidden}, {"intermediate_size", 2 * hidden},
                               {"num_hidden_layers", 1}, {"num_attention_heads", 2}, {"max_position_embeddings", 77},
                               {"hidden_act", "quick_gelu"}, {"projection_dim", 8}, {"eos_token_id", 2},
                               {"model_type", "clip_text_model"}};
  write_json(dir / "config.json", {{"architectures", {"CLIPModel"}}, {"model_type", "clip"}, {"text_config", text},
                                   {"vision_config", {{"hidden_size", 8}, {"model_type", "clip_vision_model"}}},
                                   {"projection_dim", 8}});
  nlohmann::json plain = text;
  plain.erase("model_type");
  clip::CLIPTextModel model(clip::CLIPTextConfig::from_json(plain, "tiny"), false);
  randomise(*model, seed);
  safetensors::NamedTensors stored;
  for (const auto& item : model->named_parameters()) stored.emplace_back(item.key(), item.value().clone());
  // The rest of a CLIPModel, which the text encoder passes over.
  stored.emplace_back("vision_model.embeddings.class_embedding", torch::zeros({8}));
  stored.emplace_back("text_projection.weight", torch::zeros({8, hidden}));
  stored.emplace_back("logit_scale", torch::zeros({}));
  safetensors::save_file((dir / "model.safetensors").string(), stored, {{"format", "pt"}});
}

// DIR/Qwen3-8B and DIR/clip-vit-large-patch14 of the given widths (hymotion_tiny takes 24 and 16).
inline void write_tiny_text_encoders(const std::filesystem::path& dir, int64_t qwen_hidden = 24, int64_t clip_hidden = 16) {
  write_tiny_qwen(dir / "Qwen3-8B", qwen_hidden, 21);
  write_tiny_clip_l(dir / "clip-vit-large-patch14", clip_hidden, 22);
}

}  // namespace zest::hytext::test
