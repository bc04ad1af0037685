// infer_unet: the "merge for inference" story for Stable Diffusion UNets: load a merged safetensors file
// into a UNet built from its configuration, then DDIM-sample latents from cached text embeddings.
//   infer_unet --model unet_sd15 --weights model.safetensors --text datasets/sd15_latents --sample 3
//              --out latents.npy
// The output is VAE latents × the scaling factor [B, 4, H, W]; decoding them needs the VAE (not in zest).
#include "examples/inference_util.h"
#include "models/unet/unet.h"

#include <ATen/CPUGeneratorImpl.h>
#include <CLI/CLI.hpp>
#include <torch/torch.h>

#include <cstdio>
#include <exception>
#include <optional>
#include <string>

namespace {

using zest::read_sample;
using zest::reshape_checked;
using zest::unet::UNetConditioning;
using zest::unet::UNetConfig;

// Names of the cached conditioning in a zest.latents.v1 shard (per sample, stacked along a leading dimension).
struct TextKeys {
  std::string context = "text_embeds_seq";  // [77, cross_attention_dim]
  std::string text_embeds = "pooled";       // [1280] pooled text, SDXL ("text_time") only
  std::string time_ids = "time_ids";        // [6] original size, crop, target size, SDXL only
};

int64_t text_width(const UNetConfig& config) {
  return config.projection_class_embeddings_input_dim - 6 * config.addition_time_embed_dim;
}

UNetConditioning read_conditioning(const std::string& text_path, int64_t index, const TextKeys& keys,
                                   const UNetConfig& config) {
  const auto [path, sample, stats] = zest::locate_sample(text_path, index);
  const zest::safetensors::Reader file(path);
  UNetConditioning c;
  const auto context = read_sample(file, keys.context, sample, 2);
  ZEST_CHECK(context.dim() == 2 && context.size(1) == config.cross_attention_dim.at(0), path, ": '",
             keys.context, "' has shape ", context.sizes(), "; the model expects [tokens, ",
             config.cross_attention_dim.at(0), "]");
  c.encoder_hidden_states = context.unsqueeze(0);
  if (config.text_time_embedding) {
    c.text_embeds = reshape_checked(read_sample(file, keys.text_embeds, sample, 1), {1, text_width(config)},
                                    path + ": '" + keys.text_embeds + "'");
    c.time_ids = reshape_checked(read_sample(file, keys.time_ids, sample, 1), {1, 6},
                                 path + ": '" + keys.time_ids + "'").to(torch::kFloat32);
  }
  return c;
}

// Random text embeddings of the right shapes (for trying out a model without a dataset).
UNetConditioning random_conditioning(const UNetConfig& config, int64_t tokens, int64_t height, int64_t width,
                                     torch::Generator& gen) {
  UNetConditioning c;
  c.encoder_hidden_states = torch::randn({1, tokens, config.cross_attention_dim.at(0)}, gen);
  if (config.text_time_embedding) {
    c.text_embeds = torch::randn({1, text_width(config)}, gen);
    const double h = 8.0 * height, w = 8.0 * width;  // pixel size = 8 × the latent size
    c.time_ids = torch::tensor({h, w, 0.0, 0.0, h, w}, torch::kFloat32).unsqueeze(0);
  }
  return c;
}

// The conditioning repeated for `batch` samples, on the model's device and dtype (time ids stay float32).
UNetConditioning prepare(UNetConditioning c, int64_t batch, const torch::TensorOptions& options) {
  auto expand = [&](const torch::Tensor& t, bool keep_dtype) {
    if (!t.defined()) return t;
    const auto repeated = t.expand({batch, t.size(1)}).contiguous();
    return keep_dtype ? repeated.to(options.device()) : repeated.to(options);
  };
  c.encoder_hidden_states = c.encoder_hidden_states.expand({batch, -1, -1}).contiguous().to(options);
  c.text_embeds = expand(c.text_embeds, false);
  c.time_ids = expand(c.time_ids, true);
  return c;
}

// Classifier-free guidance's unconditional input: zeros for the text (standing in for the empty prompt's
// embedding), the same size conditioning (time ids).
UNetConditioning zero_text(UNetConditioning c) {
  c.encoder_hidden_states = torch::zeros_like(c.encoder_hidden_states);
  if (c.text_embeds.defined()) c.text_embeds = torch::zeros_like(c.text_embeds);
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"infer_unet: DDIM sampling with a merged UNet2DConditionModel"};
  zest::examples::ModelArgs model_args;
  zest::examples::add_model_options(app, model_args);
  std::string text_path, uncond_path, out_path = "latents.npy";
  TextKeys keys;
  int64_t sample = 0, num_samples = 1, steps = 50, size_h = 0, size_w = 0, tokens = 77;
  uint64_t seed = 0;
  double guidance = 1.0, eta = 0.0;
  bool random_text = false;
  auto* text = app.add_option("--text", text_path, "dataset folder or shard with cached text embeddings")
                   ->check(CLI::ExistingPath);
  auto* random = app.add_flag("--random-text", random_text, "random text embeddings instead of --text");
  text->excludes(random);
  app.add_option("--sample", sample, "sample index (in the dataset, or within the shard)")->capture_default_str();
  app.add_option("--context-key", keys.context, "shard key of the text embeddings")->capture_default_str();
  app.add_option("--text-embeds-key", keys.text_embeds, "shard key of SDXL's pooled text")->capture_default_str();
  app.add_option("--time-ids-key", keys.time_ids, "shard key of SDXL's time ids")->capture_default_str();
  app.add_option("--tokens", tokens, "text tokens of --random-text")->capture_default_str();
  app.add_option("--num-samples", num_samples, "samples (same text, other noise)")->capture_default_str();
  app.add_option("--steps", steps, "DDIM steps")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--eta", eta, "DDIM eta (0 = deterministic)")->capture_default_str();
  app.add_option("--guidance-scale", guidance, "classifier-free guidance scale (1 = off)")->capture_default_str();
  app.add_option("--uncond", uncond_path, "shard whose sample 0 is the empty prompt (default: zeros)")
      ->check(CLI::ExistingFile);
  app.add_option("--height", size_h, "latent height (default: the configuration's sample_size)");
  app.add_option("--width", size_w, "latent width (default: the configuration's sample_size)");
  app.add_option("--seed", seed, "noise seed")->capture_default_str();
  app.add_option("--out", out_path, "output file (.npy or .safetensors, key \"latents\")")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  try {
    ZEST_CHECK(random_text || !text_path.empty(), "give --text DATASET_DIR|SHARD or --random-text");
    zest::examples::check_output_path(out_path);
    const auto loaded = zest::examples::load_model(model_args, "unet");
    auto& unet = dynamic_cast<zest::unet::UNet2DConditionModel&>(*loaded.module);
    const UNetConfig& config = unet.config();
    auto table = zest::model_config_table(loaded.resolved);
    const int64_t sample_size = table.is_array("sample_size")
                                    ? table.get<std::vector<int64_t>>("sample_size", {}).at(0)
                                    : table.get<int64_t>("sample_size", 64);
    const int64_t h = size_h > 0 ? size_h : sample_size, w = size_w > 0 ? size_w : sample_size;

    torch::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
    const auto options = unet.parameters().front().options();
    const UNetConditioning cond_one = random_text ? random_conditioning(config, tokens, h, w, gen)
                                                  : read_conditioning(text_path, sample, keys, config);
    const UNetConditioning cond = prepare(cond_one, num_samples, options);
    std::optional<UNetConditioning> uncond;
    if (guidance > 1.0)
      uncond = uncond_path.empty() ? zero_text(cond) : prepare(read_conditioning(uncond_path, 0, keys, config),
                                                                num_samples, options);

    // x_T ~ N(0, I), drawn on the CPU so a seed gives the same latents on any device.
    const auto noise = torch::randn({num_samples, config.in_channels, h, w}, gen).to(options);
    zest::unet::DdimOptions ddim;
    ddim.steps = steps;
    ddim.eta = eta;
    ddim.guidance_scale = guidance;
    const auto latents = zest::unet::sample_ddim(unet, noise, cond, ddim, uncond, eta > 0 ? &gen : nullptr);
    zest::examples::write_result(out_path, "latents", latents);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "infer_unet: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
