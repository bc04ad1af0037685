// Tiny Stable Diffusion pipeline folders (SD1.5-style and SDXL-style) for the `zest sample` tests: every
// part a released folder has (unet/ vae/ text_encoder/ tokenizer/, SDXL text_encoder_2/ tokenizer_2/,
// scheduler/, model_index.json) at toy sizes, seeded values, written as diffusers/transformers write them.
// tests/data/sd_tiny/ holds the committed copies that scripts/golden/make_sd_pipeline_golden.py runs the
// reference pipelines on; make_tiny_pipeline writes the same files again.
#pragma once

#include "formats/safetensors.h"
#include "clip/clip_test_util.h"
#include "models/clip/clip_text_model.h"
#include "models/model_resolve.h"
#include "models/pretrained_source.h"
#include "models/state_dict.h"
#include "models/vae/autoencoder_kl.h"

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace zest::test {

namespace sd_fs = std::filesystem;

// The first `count` merges of the real OpenAI BPE (tests/data/clip/merges.txt), with the #version line.
inline std::string first_merges(int count) {
  std::istringstream all(clip::test::read_text(clip::test::data_path("clip/merges.txt")));
  std::string out, line;
  for (int i = 0; i <= count && std::getline(all, line); ++i) out += line + "\n";
  return out;
}

inline void write_json(const sd_fs::path& path, const nlohmann::ordered_json& j) {
  sd_fs::create_directories(path.parent_path());
  std::ofstream(path) << j.dump(2) << "\n";
}

// Seeded values for every tensor in state-dict order: norm weights 1 + 0.1·N, other tensors 0.2·N.
inline void randomize(torch::nn::Module& module, uint64_t seed) {
  torch::NoGradGuard no_grad;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  for (auto& item : module.named_parameters()) {
    auto& p = item.value();
    const auto noise = torch::randn(p.sizes(), gen, torch::kFloat32);
    const bool is_scale = p.dim() == 1 && item.key().find("norm") != std::string::npos &&
                          item.key().size() > 6 && item.key().compare(item.key().size() - 6, 6, "weight") == 0;
    p.copy_(is_scale ? 1.0 + 0.1 * noise : 0.2 * noise);
  }
}

constexpr int kTinyMerges = 300;

inline void write_tokenizer(const sd_fs::path& folder, const std::string& pad) {
  sd_fs::create_directories(folder);
  const std::string merges = first_merges(kTinyMerges);
  clip::test::write_text(folder / "merges.txt", merges);
  clip::test::write_text(folder / "vocab.json", clip::test::vocab_from_merges(merges).dump());
  const nlohmann::ordered_json config = {{"bos_token", "<|startoftext|>"}, {"eos_token", "<|endoftext|>"},
                                         {"unk_token", "<|endoftext|>"},   {"pad_token", pad},
                                         {"do_lower_case", true},          {"model_max_length", 77},
                                         {"tokenizer_class", "CLIPTokenizer"}};
  write_json(folder / "tokenizer_config.json", config);
}

inline int64_t tiny_vocab_size() { return 512 + kTinyMerges + 2; }

inline void write_text_encoder(const sd_fs::path& folder, int64_t hidden, int64_t projection, bool with_projection,
                               const char* act, uint64_t seed) {
  const nlohmann::ordered_json config = {
      {"architectures", {with_projection ? "CLIPTextModelWithProjection" : "CLIPTextModel"}},
      {"model_type", "clip_text_model"}, {"vocab_size", tiny_vocab_size()}, {"hidden_size", hidden},
      {"intermediate_size", 2 * hidden}, {"projection_dim", projection}, {"num_hidden_layers", 2},
      {"num_attention_heads", 4}, {"max_position_embeddings", 77}, {"hidden_act", act}, {"layer_norm_eps", 1e-5},
      {"attention_dropout", 0.0}, {"bos_token_id", tiny_vocab_size() - 2}, {"eos_token_id", tiny_vocab_size() - 1},
      {"pad_token_id", 1}, {"torch_dtype", "float32"}};
  write_json(folder / "config.json", config);
  clip::CLIPTextModel model(clip::CLIPTextConfig::from_json(nlohmann::json::parse(config.dump()), "config.json"),
                            with_projection);
  randomize(*model, seed);
  save_state_dict(*model, (folder / "model.safetensors").string());
}

inline void write_vae(const sd_fs::path& folder, uint64_t seed) {
  const nlohmann::ordered_json config = {
      {"_class_name", "AutoencoderKL"}, {"in_channels", 3}, {"out_channels", 3},
      {"down_block_types", {"DownEncoderBlock2D", "DownEncoderBlock2D"}},
      {"up_block_types", {"UpDecoderBlock2D", "UpDecoderBlock2D"}}, {"block_out_channels", {8, 16}},
      {"layers_per_block", 1}, {"act_fn", "silu"}, {"latent_channels", 4}, {"norm_num_groups", 4},
      {"sample_size", 16}, {"scaling_factor", 0.18215}, {"force_upcast", true}};
  write_json(folder / "config.json", config);
  vae::AutoencoderKL model(vae::VaeConfig::from_json(nlohmann::json::parse(config.dump()), "config.json"));
  randomize(*model, seed);
  save_state_dict(*model, (folder / "diffusion_pytorch_model.safetensors").string());
}

inline void write_unet(const sd_fs::path& folder, bool sdxl, uint64_t seed) {
  nlohmann::ordered_json config = {
      {"_class_name", "UNet2DConditionModel"}, {"sample_size", 8}, {"in_channels", 4}, {"out_channels", 4},
      {"down_block_types", {"CrossAttnDownBlock2D", "DownBlock2D"}},
      {"up_block_types", {"UpBlock2D", "CrossAttnUpBlock2D"}}, {"block_out_channels", {8, 16}},
      {"layers_per_block", 1}, {"norm_num_groups", 4}, {"cross_attention_dim", sdxl ? 48 : 32},
      {"attention_head_dim", 2}};
  if (sdxl) {
    config["addition_embed_type"] = "text_time";
    config["addition_time_embed_dim"] = 4;
    config["projection_class_embeddings_input_dim"] = 16 + 6 * 4;
  }
  write_json(folder / "config.json", config);
  // The folder reader wants the weights file present; the architecture comes from config.json alone.
  const std::string weights = (folder / "diffusion_pytorch_model.safetensors").string();
  safetensors::save_file(weights, {});
  const auto model = build_model(resolve_pretrained_folder(folder.string()));
  randomize(*model, seed);
  save_state_dict(*model, weights);
}

// SD1.5-style (PNDMScheduler config, one CLIPTextModel) or SDXL-style (EulerDiscreteScheduler "leading",
// a second CLIPTextModelWithProjection whose tokenizer pads with "!").
inline void make_tiny_pipeline(const sd_fs::path& folder, bool sdxl) {
  sd_fs::remove_all(folder);
  write_unet(folder / "unet", sdxl, 11);
  write_vae(folder / "vae", 12);
  write_text_encoder(folder / "text_encoder", 32, 32, false, "quick_gelu", 13);
  write_tokenizer(folder / "tokenizer", "<|endoftext|>");
  nlohmann::ordered_json scheduler = {{"_class_name", sdxl ? "EulerDiscreteScheduler" : "PNDMScheduler"},
                                      {"beta_start", 0.00085}, {"beta_end", 0.012}, {"beta_schedule", "scaled_linear"},
                                      {"num_train_timesteps", 1000}, {"set_alpha_to_one", false},
                                      {"skip_prk_steps", true}, {"steps_offset", 1}, {"clip_sample", false},
                                      {"prediction_type", "epsilon"}};
  if (sdxl) scheduler["timestep_spacing"] = "leading";
  write_json(folder / "scheduler" / "scheduler_config.json", scheduler);
  nlohmann::ordered_json index = {{"_class_name", sdxl ? "StableDiffusionXLPipeline" : "StableDiffusionPipeline"},
                                  {"scheduler", {"diffusers", scheduler["_class_name"]}},
                                  {"text_encoder", {"transformers", "CLIPTextModel"}},
                                  {"tokenizer", {"transformers", "CLIPTokenizer"}},
                                  {"unet", {"diffusers", "UNet2DConditionModel"}},
                                  {"vae", {"diffusers", "AutoencoderKL"}}};
  if (sdxl) {
    write_text_encoder(folder / "text_encoder_2", 16, 16, true, "gelu", 14);
    write_tokenizer(folder / "tokenizer_2", "!");
    index["text_encoder_2"] = {"transformers", "CLIPTextModelWithProjection"};
    index["tokenizer_2"] = {"transformers", "CLIPTokenizer"};
    index["force_zeros_for_empty_prompt"] = true;
  } else {
    index["safety_checker"] = {nullptr, nullptr};
    index["feature_extractor"] = {nullptr, nullptr};
    index["requires_safety_checker"] = false;
  }
  write_json(folder / "model_index.json", index);
}

}  // namespace zest::test
