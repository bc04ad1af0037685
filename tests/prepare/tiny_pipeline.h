// Fixtures of the prepare suite: a tiny pipeline folder written as diffusers' and transformers'
// save_pretrained write one (vae/, text_encoder/, tokenizer/, and for the SDXL shape text_encoder_2/,
// tokenizer_2/: config.json + safetensors weights; the tokenizers from the real OpenAI merges, cut to
// the first 2000), shaped so that unet_tiny trains on what it encodes; and small PNG images.
#pragma once

#include "formats/safetensors.h"
#include "clip/clip_test_util.h"
#include "models/clip/clip_text_model.h"
#include "models/vae/autoencoder_kl.h"

#define STB_IMAGE_WRITE_STATIC
#define STB_IMAGE_WRITE_IMPLEMENTATION
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wunused-function"
#endif
#include <stb_image_write.h>
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif

#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace zest::testing {

namespace fs = std::filesystem;

inline void write_json(const fs::path& path, const nlohmann::json& json) { std::ofstream(path) << json.dump(2) << "\n"; }

// Seeded values for every parameter: norms near 1, everything else small (the modules start at zero).
inline void randomize(torch::nn::Module& module, int64_t seed) {
  torch::manual_seed(seed);
  torch::NoGradGuard no_grad;
  for (auto& p : module.named_parameters()) {
    const bool norm = p.key().find("norm") != std::string::npos && p.key().ends_with("weight");
    p.value().copy_(norm ? 1 + 0.1 * torch::randn_like(p.value()) : 0.3 * torch::randn_like(p.value()));
  }
}

inline void save_module(const torch::nn::Module& module, const fs::path& path) {
  safetensors::NamedTensors tensors;
  for (const auto& p : module.named_parameters()) tensors.emplace_back(p.key(), p.value().detach().contiguous());
  safetensors::save_file(path.string(), tensors, {{"format", "pt"}});
}

inline void write_tokenizer(const fs::path& folder, const std::string& pad, int64_t merges_kept) {
  fs::create_directories(folder);
  std::istringstream all(clip::test::read_text(clip::test::data_path("clip/merges.txt")));
  std::string merges, line;
  for (int64_t i = 0; i <= merges_kept && std::getline(all, line); ++i) merges += line + "\n";  // + the #version line
  clip::test::write_text(folder / "merges.txt", merges);
  clip::test::write_text(folder / "vocab.json", clip::test::vocab_from_merges(merges).dump());
  write_json(folder / "tokenizer_config.json",
             {{"bos_token", "<|startoftext|>"}, {"eos_token", "<|endoftext|>"}, {"unk_token", "<|endoftext|>"},
              {"pad_token", pad}, {"do_lower_case", true}, {"model_max_length", 77}, {"tokenizer_class", "CLIPTokenizer"}});
}

inline void write_text_encoder(const fs::path& folder, int64_t vocab, int64_t hidden, int64_t projection,
                               bool with_projection, const std::string& act, int64_t seed) {
  fs::create_directories(folder);
  const nlohmann::json config = {
      {"architectures", {with_projection ? "CLIPTextModelWithProjection" : "CLIPTextModel"}},
      {"model_type", "clip_text_model"}, {"vocab_size", vocab}, {"hidden_size", hidden},
      {"intermediate_size", 2 * hidden}, {"projection_dim", projection}, {"num_hidden_layers", 2},
      {"num_attention_heads", 2}, {"max_position_embeddings", 77}, {"hidden_act", act},
      {"layer_norm_eps", 1e-5}, {"bos_token_id", vocab - 2}, {"eos_token_id", vocab - 1}, {"pad_token_id", 1}};
  write_json(folder / "config.json", config);
  clip::CLIPTextModel model(clip::CLIPTextConfig::from_json(config, "config.json"), with_projection);
  randomize(*model, seed);
  save_module(*model, folder / "model.safetensors");
}

inline nlohmann::json tiny_vae_config() {
  return nlohmann::json::parse(R"({
    "_class_name": "AutoencoderKL", "in_channels": 3, "out_channels": 3,
    "down_block_types": ["DownEncoderBlock2D", "DownEncoderBlock2D"],
    "up_block_types": ["UpDecoderBlock2D", "UpDecoderBlock2D"], "block_out_channels": [8, 16],
    "layers_per_block": 1, "act_fn": "silu", "latent_channels": 4, "norm_num_groups": 4, "sample_size": 16,
    "scaling_factor": 0.13025, "force_upcast": true})");
}

// The pipeline folder. sdxl: text_encoder (hidden 4) + text_encoder_2 (hidden 8, projection 8): text_dim
// 12 and pooled 8, unet_tiny's widths. Otherwise one text encoder of hidden 12.
inline void write_tiny_pipeline(const fs::path& dir, bool sdxl = true) {
  constexpr int64_t kMerges = 2000;
  constexpr int64_t kVocab = 512 + kMerges + 2;
  write_tokenizer(dir / "tokenizer", "<|endoftext|>", kMerges);
  write_text_encoder(dir / "text_encoder", kVocab, sdxl ? 4 : 12, 4, false, "quick_gelu", 21);
  if (sdxl) {
    write_tokenizer(dir / "tokenizer_2", "!", kMerges);
    write_text_encoder(dir / "text_encoder_2", kVocab, 8, 8, true, "gelu", 22);
  }
  fs::create_directories(dir / "vae");
  write_json(dir / "vae" / "config.json", tiny_vae_config());
  vae::AutoencoderKL vae(vae::VaeConfig::from_json(tiny_vae_config(), "vae/config.json"));
  randomize(*vae, 23);
  save_module(*vae, dir / "vae" / "diffusion_pytorch_model.safetensors");
}

// A smooth, seeded RGB picture of width × height (channels: gradients with a per-seed phase).
inline std::vector<uint8_t> test_picture(int width, int height, int seed) {
  std::vector<uint8_t> rgb(static_cast<size_t>(width * height * 3));
  for (int y = 0; y < height; ++y)
    for (int x = 0; x < width; ++x)
      for (int c = 0; c < 3; ++c)
        rgb[(y * width + x) * 3 + c] = static_cast<uint8_t>((x * (7 + c) + y * (5 + 2 * c) + seed * 37 * (c + 1)) % 256);
  return rgb;
}

inline void write_png(const fs::path& path, int width, int height, int seed, int channels = 3) {
  std::vector<uint8_t> rgb = test_picture(width, height, seed);
  std::vector<uint8_t> pixels;
  for (int i = 0; i < width * height; ++i)
    for (int c = 0; c < channels; ++c) pixels.push_back(c < 3 ? rgb[i * 3 + c] : static_cast<uint8_t>(128 + i % 100));
  ASSERT_TRUE(stbi_write_png(path.string().c_str(), width, height, channels, pixels.data(), width * channels));
}

inline void write_jpeg(const fs::path& path, int width, int height, int seed) {
  const std::vector<uint8_t> rgb = test_picture(width, height, seed);
  ASSERT_TRUE(stbi_write_jpg(path.string().c_str(), width, height, 3, rgb.data(), 95));
}

}  // namespace zest::testing
