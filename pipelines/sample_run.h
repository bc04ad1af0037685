// `zest sample`'s work, after its arguments are parsed (cli/cmd_sample.cpp): every option checked before
// anything loads, then the Stable Diffusion pipeline's pictures (sd_pipeline.h; n > 1 pictures into one grid)
// or, with a HY-Motion release folder, its motions (motion_pipeline.h: from a prompt encoded by the release's
// text encoders, a sample of cached text features, or random text), LoRA adapters on top (models/lora_file.h),
// written as a PNG or as .npy with a skeleton animation (GIF) per sample beside it; one summary line printed.
// Its messages name the command's options (--prompt, --ema, ...), as the user gave them.
#pragma once

#include "pipelines/motion_pipeline.h"
#include "pipelines/weights_source.h"

#include <cstdint>
#include <optional>
#include <string>

namespace zest {

struct SampleOptions {
  std::string pretrained;
  WeightsSource weights;
  std::optional<int64_t> steps;   // unset: 30 (pictures), 50 (motion)
  std::optional<double> guidance; // unset: 7.5 (pictures), the release's own (motion)
  double guidance_rescale = 0.0;  // pictures: diffusers' guidance_rescale
  uint64_t seed = 0;
  int64_t count = 1;
  std::string device = "auto";
  std::string dtype = "auto";
  std::string output;
  std::string lora;         // --lora: adapters on top of the weights (models/lora_file.h)
  double lora_scale = 1.0;  // --lora-scale
  bool lora_scale_given = false;  // --lora-scale on the command line, even as its default 1: it needs --lora
  // Stable Diffusion
  std::string prompt;
  std::string negative_prompt;
  bool has_negative = false;
  std::string size = "512x512";
  std::string scheduler;  // "": the pipeline's own
  // HY-Motion
  std::string text;  // dataset folder or shard of cached text features
  std::string text_encoders;  // folder holding Qwen3-8B/ and clip-vit-large-patch14/ ("": the release's layout)
  int64_t text_tokens = hytext::kDefaultMaxTextTokens;
  int64_t sample = 0;
  bool random_text = false;
  int64_t tokens = 32;
  int64_t frames = 180;
  std::string stats;  // mean/std file ("": the dataset's, else the release's)
  MotionTextKeys keys;
};

// Pictures or motions, by the family whose folder --pretrained is (pipelines/family_pipeline.h: a HY-Motion
// release has its config.yml, any other folder is read as a Stable Diffusion pipeline); throws zest::Error on
// a bad option or input.
void run_sample(const SampleOptions& args);

// Shared by the families' `zest sample` runs (pipelines/*_samples.cpp), each message naming the option:
bool has_suffix(const std::string& s, const std::string& suffix);
torch::Device sample_device(const std::string& name);  // --device auto | cpu | cuda | cuda:N
// --dtype auto | fp32 | bf16 | fp16; auto is `gpu_auto` on a GPU (the family's usual half precision), else fp32.
torch::Dtype sample_dtype(const std::string& name, const torch::Device& device, torch::Dtype gpu_auto);
// --lora FILE|CHECKPOINT [--lora-scale S]: the adapters on top of the loaded network, with one line saying so.
void add_lora(torch::nn::Module& network, const std::string& family, const SampleOptions& args);

}  // namespace zest
