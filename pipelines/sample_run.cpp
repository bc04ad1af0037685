// `zest sample`'s work (see sample_run.h).
#include "pipelines/sample_run.h"

#include "checkpoint/output_path.h"
#include "core/check.h"
#include "core/untrusted_file.h"
#include "data/png_write.h"
#include "formats/npy.h"
#include "models/hymotion/released_format.h"
#include "models/lora_file.h"
#include "pipelines/motion_pipeline.h"
#include "pipelines/sd_pipeline.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/cuda.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>

namespace zest {
namespace {

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
void add_lora(torch::nn::Module& network, const std::string& family, const SampleOptions& args) {
  if (args.lora.empty()) return;
  const LoadedLora loaded = load_lora(network, family, args.lora, args.lora_scale);
  std::printf("LoRA %s: %lld layers, rank %lld, alpha %g, scale %g\n", args.lora.c_str(),
              static_cast<long long>(loaded.layers), static_cast<long long>(loaded.rank), loaded.alpha, args.lora_scale);
}

void sample_motion(const SampleOptions& args) {
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

void sample_pictures(const SampleOptions& args) {
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

}  // namespace

void run_sample(const SampleOptions& args) {
  ZEST_CHECK(!args.weights.ema || !args.weights.checkpoint.empty(), "--ema needs --checkpoint");
  ZEST_CHECK(args.lora_scale == 1.0 || !args.lora.empty(), "--lora-scale needs --lora");
  if (is_motion_release(args.pretrained)) return sample_motion(args);
  sample_pictures(args);
}

}  // namespace zest
