// A Stable Diffusion pipeline folder (SD1.5: unet/ vae/ text_encoder/ tokenizer/; SDXL also text_encoder_2/
// tokenizer_2/; scheduler/scheduler_config.json when present) loaded into zest's modules, and text → pictures
// as diffusers' StableDiffusionPipeline / StableDiffusionXLPipeline compute them: prompt embeddings,
// seeded latents, the scheduler with classifier-free guidance, the VAE decode, [0, 255] pixels.
#pragma once

#include "models/clip/clip_text_model.h"
#include "models/clip/clip_tokenizer.h"
#include "models/unet/scheduler.h"
#include "models/unet/unet_model.h"
#include "models/vae/autoencoder_kl.h"
#include "pipelines/weights_source.h"

#include <torch/torch.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

namespace zest {

struct SdPipeline {
  std::filesystem::path folder;
  std::optional<clip::CLIPTokenizer> tokenizer, tokenizer_2;
  clip::CLIPTextModel text_encoder{nullptr}, text_encoder_2{nullptr};  // text_encoder_2: SDXL only
  vae::AutoencoderKL vae{nullptr};
  std::shared_ptr<torch::nn::Module> unet_module;  // owns the UNet
  unet::UNet2DConditionModel* unet = nullptr;
  unet::SchedulerConfig scheduler;
  bool force_zeros_for_empty_prompt = true;  // SDXL: no negative prompt → zero embeddings (model_index.json)
  torch::Device device = torch::kCPU;
  torch::Dtype dtype = torch::kFloat32;

  bool is_sdxl() const { return !text_encoder_2.is_empty(); }
  // Pixels per latent: 2^(VAE blocks − 1); sizes must be multiples of this × the UNet's downsampling.
  int64_t vae_scale_factor() const;
  int64_t size_multiple() const;
};

// Loads every part (strictly, by the reference names) onto `device` in `dtype` (the VAE in float32 when its
// config says force_upcast and dtype is float16). A missing part is one message naming the folder and what
// a pipeline folder holds.
SdPipeline load_sd_pipeline(const std::filesystem::path& folder, const WeightsSource& source,
                            torch::Device device, torch::Dtype dtype);

// Replaces the UNet's values by those of `weights_file` (safetensors, the UNet's state-dict names, strict):
// the validation samples' way to sample the weights of the step without reloading the other parts.
void load_unet_values(SdPipeline& pipeline, const std::string& weights_file);

struct SampleRequest {
  std::string prompt;
  std::optional<std::string> negative_prompt;  // unset: "" (SD1.5) or zeros (SDXL, force_zeros_for_empty_prompt)
  int64_t steps = 30;
  double guidance_scale = 7.5;
  double guidance_rescale = 0.0;  // diffusers' guidance_rescale (zero-terminal-SNR models): 0 = off, up to 1
  uint64_t seed = 0;
  int64_t width = 512, height = 512;
  int64_t count = 1;  // images for the prompt
  std::optional<unet::SchedulerKind> scheduler;  // unset: the pipeline's own class (default_scheduler_kind)
};

// "512x512" (WIDTHxHEIGHT) → {width, height}; errors say what was expected.
std::pair<int64_t, int64_t> parse_image_size(const std::string& text);

// [count, height, width, 3] uint8 on the CPU. Latents are drawn as diffusers' randn_tensor with a CPU
// torch.Generator seeded with `seed`, so the same seed gives the same pictures as the reference pipeline.
torch::Tensor generate_images(SdPipeline& pipeline, const SampleRequest& request);

}  // namespace zest
