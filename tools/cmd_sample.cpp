// `zest sample --pretrained PIPELINE_DIR [--weights model.safetensors | --checkpoint RUN/checkpoints [--ema]]
// --prompt "..." [--negative-prompt ...] [--steps 30] [--guidance 7.5] [--seed 0] [--size 512x512] [-n 4]
// [--scheduler ddim|euler|dpmpp] -o out.png`: text → pictures with a Stable Diffusion (SD1.5 / SDXL) pipeline
// folder (tools/sd_pipeline.h); n > 1 pictures go into one grid.
// With a HY-Motion release folder (config.yml + latest.ckpt): `--prompt "..." [--text-encoders DIR] |
// --text DATASET|SHARD [--sample I] | --random-text`, `[--frames 180] -o motion.npy`: text features → motion (tools/motion_pipeline.h), written
// as .npy with a skeleton animation (GIF) per sample beside it.
#include "tools/commands.h"

#include "checkpoint/output_path.h"
#include "core/check.h"
#include "core/untrusted_file.h"
#include "data/png_write.h"
#include "formats/npy.h"
#include "models/hymotion/released_format.h"
#include "models/lora_file.h"
#include "tools/motion_pipeline.h"
#include "tools/sd_pipeline.h"

#include <ATen/CPUGeneratorImpl.h>

#include <CLI/CLI.hpp>
#include <torch/cuda.h>

#include <chrono>
#include <filesystem>
#include <optional>
#include <cstdio>
#include <memory>
#include <string>

namespace zest::cli {
namespace {

struct SampleArgs {
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

bool is_motion_release(const std::string& folder) {
  return std::filesystem::exists(std::filesystem::path(folder) / hymotion::kReleaseConfigName);
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

torch::Device pick_device(const std::string& name) {
  if (name == "auto") return torch::cuda::is_available() ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
  try {
    return torch::Device(name);
  } catch (const std::exception&) {
    ZEST_FAIL("--device '", name, "': expected auto, cpu, cuda or cuda:N");
  }
}

// auto: the GPU's usual half precision for the family (fp16 for Stable Diffusion, bf16 for HY-Motion).
torch::Dtype pick_dtype(const std::string& name, const torch::Device& device, torch::Dtype gpu_auto) {
  if (name == "auto") return device.is_cuda() ? gpu_auto : torch::kFloat32;
  if (name == "fp32") return torch::kFloat32;
  if (name == "bf16") return torch::kBFloat16;
  if (name == "fp16") return torch::kHalf;
  ZEST_FAIL("--dtype '", name, "': expected auto, fp32, bf16 or fp16");
}

// --lora FILE|CHECKPOINT [--lora-scale S]: the adapters on top of the loaded network.
void add_lora(torch::nn::Module& network, const std::string& family, const SampleArgs& args) {
  if (args.lora.empty()) return;
  const LoadedLora loaded = load_lora(network, family, args.lora, args.lora_scale);
  std::printf("LoRA %s: %lld layers, rank %lld, alpha %g, scale %g\n", args.lora.c_str(),
              static_cast<long long>(loaded.layers), static_cast<long long>(loaded.rank), loaded.alpha, args.lora_scale);
}

void sample_motion(const SampleArgs& args) {
  // Every argument is checked before the pipeline loads, so that a typo costs no loading time.
  ZEST_CHECK(ends_with(args.output, ".npy"), "-o ", args.output, ": a HY-Motion sample is written as .npy (with a "
             ".gif beside it); the file name must end in .npy");
  ZEST_CHECK(!args.has_negative, "--negative-prompt: ", args.pretrained, " is a HY-Motion release, whose guidance "
             "steers away from its learned null text features, not from a prompt");
  const int given = (args.prompt.empty() ? 0 : 1) + (args.text.empty() ? 0 : 1) + (args.random_text ? 1 : 0);
  ZEST_CHECK(given == 1, "give one of --prompt TEXT, --text DATASET|SHARD (cached text features) or --random-text");
  checkpoint::check_output_target(args.output);
  MotionRequest request;
  request.frames = args.frames;
  request.steps = args.steps.value_or(50);
  request.guidance_scale = args.guidance;
  request.seed = args.seed;
  request.count = args.count;
  const torch::Device device = pick_device(args.device);
  const torch::Dtype dtype = pick_dtype(args.dtype, device, torch::kBFloat16);
  SampleLocation where;
  if (!args.text.empty()) where = locate_sample(args.text, args.sample);
  request.stats = args.stats.empty() ? where.stats : args.stats;

  std::optional<hytext::TextEncoderFolders> encoders;
  if (!args.prompt.empty()) encoders = hytext::find_text_encoders(args.pretrained, args.text_encoders);

  const auto start = std::chrono::steady_clock::now();
  std::optional<hytext::MotionTextFeatures> prompt_features;
  if (encoders) {  // encoded first, and the encoders freed before the network loads (Qwen3-8B is 16 GB)
    const hytext::HyTextEncoder encoder(*encoders, device, dtype == torch::kFloat32 ? torch::kFloat32 : torch::kBFloat16,
                                        args.text_tokens);
    prompt_features = encoder.encode({args.prompt});
    std::printf("text: \"%s\" encoded by Qwen3 (%lld of %lld tokens) and CLIP-L\n", printable(args.prompt, 80).c_str(),
                static_cast<long long>(prompt_features->ctxt_length[0].item<int64_t>()),
                static_cast<long long>(args.text_tokens));
  }
  MotionPipeline pipeline = load_motion_pipeline(args.pretrained, args.weights, device, dtype);
  add_lora(*pipeline.model, "hymotion", args);
  const auto& config = pipeline.model->config();
  torch::Generator text_gen = at::make_generator<at::CPUGeneratorImpl>(args.seed);
  const MotionText text = prompt_features ? motion_text_of(*prompt_features, *encoders, config)
                          : args.random_text ? random_motion_text(config, args.tokens, text_gen)
                                             : read_motion_text(where, args.keys, config);
  const auto loaded = std::chrono::steady_clock::now();
  const torch::Tensor motion = generate_motion(pipeline, text, request);
  checkpoint::write_output_file(args.output, npy::encode(motion));
  const auto animations = write_motion_animations(args.output.substr(0, args.output.size() - 4), motion);
  const auto done = std::chrono::steady_clock::now();
  std::printf("wrote %s: %lld motion%s of %lld frames, %lld Euler steps, guidance %g, seed %llu; loading %.1f s, "
              "sampling %.1f s\n",
              args.output.c_str(), static_cast<long long>(request.count), request.count > 1 ? "s" : "",
              static_cast<long long>(request.frames), static_cast<long long>(request.steps),
              request.guidance_scale.value_or(pipeline.guidance_scale), static_cast<unsigned long long>(args.seed),
              std::chrono::duration<double>(loaded - start).count(), std::chrono::duration<double>(done - loaded).count());
  for (const std::string& gif : animations) std::printf("wrote %s (skeleton animation)\n", gif.c_str());
  if (animations.empty()) std::printf("%s\n", missing_animation_note(motion).c_str());
}

void sample_pictures(const SampleArgs& args) {
  // Every argument is checked before the pipeline loads, so that a typo costs no loading time.
  ZEST_CHECK(ends_with(args.output, ".png"), "-o ", args.output, ": the file name must end in .png");
  ZEST_CHECK(!args.prompt.empty(), "--prompt is required: what to draw");
  ZEST_CHECK(args.text.empty() && !args.random_text, "--text/--random-text: ", args.pretrained, " is a Stable "
             "Diffusion pipeline; give the text as --prompt");
  SampleRequest request;
  std::tie(request.width, request.height) = parse_image_size(args.size);
  request.prompt = args.prompt;
  if (args.has_negative) request.negative_prompt = args.negative_prompt;
  request.steps = args.steps.value_or(30);
  request.guidance_scale = args.guidance.value_or(7.5);
  ZEST_CHECK(args.guidance_rescale >= 0 && args.guidance_rescale <= 1, "--guidance-rescale ", args.guidance_rescale,
             ": expected 0 to 1 (0.7 is the paper's choice for zero-terminal-SNR models)");
  request.guidance_rescale = args.guidance_rescale;
  request.seed = args.seed;
  request.count = args.count;
  if (!args.scheduler.empty()) request.scheduler = unet::parse_scheduler_kind(args.scheduler);
  const torch::Device device = pick_device(args.device);
  const torch::Dtype dtype = pick_dtype(args.dtype, device, torch::kHalf);

  const auto start = std::chrono::steady_clock::now();
  SdPipeline pipeline = load_sd_pipeline(args.pretrained, args.weights, device, dtype);
  add_lora(*pipeline.unet_module, "unet", args);
  const auto loaded = std::chrono::steady_clock::now();
  const torch::Tensor images = generate_images(pipeline, request);
  write_png(args.output, request.count > 1 ? image_grid(images) : images[0]);
  const auto done = std::chrono::steady_clock::now();
  const auto kind = request.scheduler.value_or(unet::default_scheduler_kind(pipeline.scheduler));
  std::printf("wrote %s: %lld picture%s of %lldx%lld, %s %lld steps, guidance %g, seed %llu; loading %.1f s, "
              "sampling %.1f s\n",
              args.output.c_str(), static_cast<long long>(request.count), request.count > 1 ? "s (a grid)" : "",
              static_cast<long long>(request.width), static_cast<long long>(request.height), unet::to_string(kind),
              static_cast<long long>(request.steps), request.guidance_scale,
              static_cast<unsigned long long>(request.seed), std::chrono::duration<double>(loaded - start).count(),
              std::chrono::duration<double>(done - loaded).count());
}

void run_sample(const SampleArgs& args) {
  ZEST_CHECK(!args.weights.ema || !args.weights.checkpoint.empty(), "--ema needs --checkpoint");
  ZEST_CHECK(args.lora_scale == 1.0 || !args.lora.empty(), "--lora-scale needs --lora");
  if (is_motion_release(args.pretrained)) return sample_motion(args);
  sample_pictures(args);
}

}  // namespace

void add_sample_command(CLI::App& app) {
  auto args = std::make_shared<SampleArgs>();
  CLI::App* cmd = app.add_subcommand(
      "sample", "Pictures from a prompt with a Stable Diffusion pipeline folder, or motions from text features "
                "with a HY-Motion release folder");
  cmd->add_option("--pretrained", args->pretrained,
                  "pipeline folder (unet/ vae/ text_encoder/ tokenizer/ ...), or a HY-Motion release (config.yml + "
                  "latest.ckpt)")
      ->required();
  auto* weights = cmd->add_option("--weights", args->weights.weights_file,
                                  "network weights to sample (safetensors with the UNet's / HY-Motion network's "
                                  "names, e.g. RUN/model.safetensors)");
  auto* ckpt = cmd->add_option("--checkpoint", args->weights.checkpoint,
                               "or a zest checkpoint (RUN/checkpoints, its latest, or a step_N/ folder)");
  weights->excludes(ckpt);
  cmd->add_flag("--ema", args->weights.ema, "with --checkpoint: the EMA of the weights");
  cmd->add_option("--lora", args->lora,
                  "LoRA adapters on top: a LoRA file (pytorch_lora_weights.safetensors, peft/diffusers names), a "
                  "folder holding one, or a LoRA run's checkpoint");
  cmd->add_option("--lora-scale", args->lora_scale, "the adapters' output times this (diffusers' lora_scale)")
      ->capture_default_str();
  cmd->add_option("--prompt", args->prompt, "what to draw (Stable Diffusion), or the motion to make (HY-Motion: encoded "
                                            "by Qwen3-8B and CLIP-L as the release does)");
  cmd->add_option("--text-encoders", args->text_encoders, "HY-Motion --prompt: the folder holding Qwen3-8B/ and "
                                                          "clip-vit-large-patch14/ (default: the release's ckpts/ layout)");
  cmd->add_option("--text-tokens", args->text_tokens, "HY-Motion --prompt: Qwen3 tokens after the system prompt")
      ->capture_default_str();
  cmd->add_option("--negative-prompt", args->negative_prompt, "what to steer away from (classifier-free guidance)")
      ->each([args](const std::string&) { args->has_negative = true; });
  cmd->add_option("--steps", args->steps, "denoising steps (default 30; HY-Motion: 50 Euler steps)");
  cmd->add_option("--guidance", args->guidance,
                  "classifier-free guidance scale, 1 = off (default 7.5; HY-Motion: the release's, else 5)");
  cmd->add_option("--guidance-rescale", args->guidance_rescale,
                  "Stable Diffusion: rescale of the guided prediction, 0 to 1 (diffusers' guidance_rescale; 0.7 for "
                  "zero-terminal-SNR v-prediction models)")
      ->capture_default_str();
  cmd->add_option("--seed", args->seed, "seed of the starting noise (a CPU generator, as diffusers')")
      ->capture_default_str();
  cmd->add_option("--size", args->size, "WIDTHxHEIGHT in pixels")->capture_default_str();
  cmd->add_option("-n,--num-images", args->count, "pictures (one grid for n > 1), or motions of the same text")
      ->capture_default_str();
  auto* text = cmd->add_option("--text", args->text,
                               "HY-Motion: cached text features, a dataset folder (zest data prepare/synth) or a shard");
  auto* random = cmd->add_flag("--random-text", args->random_text, "HY-Motion: random text features (trying a model out)");
  text->excludes(random);
  cmd->add_option("--sample", args->sample, "HY-Motion: which sample of --text (global in a dataset folder)")
      ->capture_default_str();
  cmd->add_option("--tokens", args->tokens, "HY-Motion: text tokens of --random-text")->capture_default_str();
  cmd->add_option("--frames", args->frames, "HY-Motion: motion length in frames (30 fps)")->capture_default_str();
  cmd->add_option("--stats", args->stats, "HY-Motion: mean/std file to denormalise with (default: the dataset's, "
                                          "else the release's)");
  cmd->add_option("--ctxt-key", args->keys.ctxt, "HY-Motion: shard key of the LLM token features")->capture_default_str();
  cmd->add_option("--ctxt-mask-key", args->keys.ctxt_mask, "HY-Motion: shard key of their mask")->capture_default_str();
  cmd->add_option("--vtxt-key", args->keys.vtxt, "HY-Motion: shard key of the pooled CLIP feature")->capture_default_str();
  cmd->add_option("--scheduler", args->scheduler,
                  "ddim | euler | dpmpp (default: the pipeline's scheduler class when it is one of these, else ddim)");
  cmd->add_option("--device", args->device, "auto (a GPU when there is one) | cpu | cuda | cuda:N")->capture_default_str();
  cmd->add_option("--dtype", args->dtype, "auto (on a GPU fp16, HY-Motion bf16; fp32 on the CPU) | fp32 | bf16 | fp16")
      ->capture_default_str();
  cmd->add_option("-o,--output", args->output, "the PNG to write, or HY-Motion's .npy (replaced if it exists)")
      ->required();
  cmd->callback([args] { run_sample(*args); });
}

}  // namespace zest::cli
