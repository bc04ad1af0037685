// `zest sample --pretrained PIPELINE_DIR [--weights model.safetensors | --checkpoint RUN/checkpoints [--ema]]
// --prompt "..." [--negative-prompt ...] [--steps 30] [--guidance 7.5] [--seed 0] [--size 512x512] [-n 4]
// [--scheduler ddim|euler|dpmpp] -o out.png`: text → pictures with a Stable Diffusion (SD1.5 / SDXL) pipeline
// folder (tools/sd_pipeline.h); n > 1 pictures go into one grid.
#include "tools/commands.h"

#include "core/check.h"
#include "data/png_write.h"
#include "tools/sd_pipeline.h"

#include <CLI/CLI.hpp>
#include <torch/cuda.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

namespace zest::cli {
namespace {

struct SampleArgs {
  std::string pretrained;
  UNetWeightsSource unet;
  std::string prompt;
  std::string negative_prompt;
  bool has_negative = false;
  int64_t steps = 30;
  double guidance = 7.5;
  uint64_t seed = 0;
  std::string size = "512x512";
  int64_t count = 1;
  std::string scheduler;  // "": the pipeline's own
  std::string device = "auto";
  std::string dtype = "auto";
  std::string output;
};

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

torch::Dtype pick_dtype(const std::string& name, const torch::Device& device) {
  if (name == "auto") return device.is_cuda() ? torch::kHalf : torch::kFloat32;
  if (name == "fp32") return torch::kFloat32;
  if (name == "bf16") return torch::kBFloat16;
  if (name == "fp16") return torch::kHalf;
  ZEST_FAIL("--dtype '", name, "': expected auto, fp32, bf16 or fp16");
}

void run_sample(const SampleArgs& args) {
  // Every argument is checked before the pipeline loads, so that a typo costs no loading time.
  ZEST_CHECK(ends_with(args.output, ".png"), "-o ", args.output, ": the file name must end in .png");
  SampleRequest request;
  std::tie(request.width, request.height) = parse_image_size(args.size);
  request.prompt = args.prompt;
  if (args.has_negative) request.negative_prompt = args.negative_prompt;
  request.steps = args.steps;
  request.guidance_scale = args.guidance;
  request.seed = args.seed;
  request.count = args.count;
  if (!args.scheduler.empty()) request.scheduler = unet::parse_scheduler_kind(args.scheduler);
  ZEST_CHECK(!args.unet.ema || !args.unet.checkpoint.empty(), "--ema needs --checkpoint");
  const torch::Device device = pick_device(args.device);
  const torch::Dtype dtype = pick_dtype(args.dtype, device);

  const auto start = std::chrono::steady_clock::now();
  SdPipeline pipeline = load_sd_pipeline(args.pretrained, args.unet, device, dtype);
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

void add_sample_command(CLI::App& app) {
  auto args = std::make_shared<SampleArgs>();
  CLI::App* cmd = app.add_subcommand("sample", "Generate pictures from a prompt with a Stable Diffusion pipeline folder");
  cmd->add_option("--pretrained", args->pretrained, "pipeline folder (unet/ vae/ text_encoder/ tokenizer/ ...)")
      ->required();
  auto* weights = cmd->add_option("--weights", args->unet.weights_file,
                                  "UNet weights to sample (safetensors with the UNet's names, e.g. RUN/model.safetensors)");
  auto* ckpt = cmd->add_option("--checkpoint", args->unet.checkpoint,
                               "or a zest checkpoint (RUN/checkpoints, its latest, or a step_N/ folder)");
  weights->excludes(ckpt);
  cmd->add_flag("--ema", args->unet.ema, "with --checkpoint: the EMA of the weights");
  cmd->add_option("--prompt", args->prompt, "what to draw")->required();
  cmd->add_option("--negative-prompt", args->negative_prompt, "what to steer away from (classifier-free guidance)")
      ->each([args](const std::string&) { args->has_negative = true; });
  cmd->add_option("--steps", args->steps, "denoising steps")->capture_default_str();
  cmd->add_option("--guidance", args->guidance, "classifier-free guidance scale (1 = off)")->capture_default_str();
  cmd->add_option("--seed", args->seed, "seed of the starting noise (a CPU generator, as diffusers')")
      ->capture_default_str();
  cmd->add_option("--size", args->size, "WIDTHxHEIGHT in pixels")->capture_default_str();
  cmd->add_option("-n,--num-images", args->count, "pictures (one grid for n > 1)")->capture_default_str();
  cmd->add_option("--scheduler", args->scheduler,
                  "ddim | euler | dpmpp (default: the pipeline's scheduler class when it is one of these, else ddim)");
  cmd->add_option("--device", args->device, "auto (a GPU when there is one) | cpu | cuda | cuda:N")->capture_default_str();
  cmd->add_option("--dtype", args->dtype, "auto (fp16 on a GPU, fp32 on the CPU) | fp32 | bf16 | fp16")
      ->capture_default_str();
  cmd->add_option("-o,--output", args->output, "the PNG to write (replaced if it exists)")->required();
  cmd->callback([args] { run_sample(*args); });
}

}  // namespace zest::cli
