// `zest sample --pretrained PIPELINE_DIR [--weights model.safetensors | --checkpoint RUN/checkpoints [--ema]]
// --prompt "..." [--negative-prompt ...] [--steps 30] [--guidance 7.5] [--seed 0] [--size 512x512] [-n 4]
// [--scheduler ddim|euler|dpmpp] -o out.png`: text → pictures with a Stable Diffusion (SD1.5 / SDXL) pipeline
// folder (pipelines/sd_pipeline.h); n > 1 pictures go into one grid.
// With a HY-Motion release folder (config.yml + latest.ckpt): `--prompt "..." [--text-encoders DIR] |
// --text DATASET|SHARD [--sample I] | --random-text`, `[--frames 180] -o motion.npy`: text features → motion
// (pipelines/motion_pipeline.h), written as .npy with a skeleton animation (GIF) per sample beside it.
// This file parses the options; pipelines/sample_run.h does the work.
#include "cli/commands.h"

#include "pipelines/sample_run.h"

#include <CLI/CLI.hpp>

#include <memory>
#include <string>

namespace zest::cli {

void add_sample_command(CLI::App& app) {
  auto args = std::make_shared<SampleOptions>();
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
      ->capture_default_str()
      ->each([args](const std::string&) { args->lora_scale_given = true; });
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
