// infer_hymotion: the "merge for inference" story for HY-Motion: load a merged safetensors file into a
// model built from its configuration, then integrate the flow ODE (Euler) from noise to motion,
// conditioned on cached text features.
//   infer_hymotion --model hymotion_1b --weights model.safetensors --text datasets/hymotion --sample 3
//                  --frames 180 --out motion.npy
// The output is motion features [B, frames, 201], denormalised with the dataset's mean/std when --text is
// a dataset folder (or --stats names the file), else as the model produces them (normalised); beside it
// a skeleton animation per sample (motion.gif, or motion_<i>.gif), drawn from the 22 joint positions.
#include "examples/inference_util.h"
#include "models/hymotion/hymotion.h"
#include "pipelines/motion_pipeline.h"

#include <ATen/CPUGeneratorImpl.h>
#include <CLI/CLI.hpp>
#include <torch/torch.h>

#include <cstdio>
#include <exception>
#include <string>

int main(int argc, char** argv) {
  CLI::App app{"infer_hymotion: Euler ODE sampling with a merged HY-Motion model"};
  zest::examples::ModelArgs model_args;
  zest::examples::add_model_options(app, model_args);
  std::string text_path, null_path, stats_path, out_path = "motion.npy";
  zest::MotionTextKeys keys;
  int64_t sample = 0, num_samples = 1, steps = 50, frames = 360, tokens = 32;
  uint64_t seed = 0;
  double guidance = 1.0;
  bool use_random_text = false;
  auto* text = app.add_option("--text", text_path, "dataset folder or shard with cached text features")
                   ->check(CLI::ExistingPath);
  auto* random = app.add_flag("--random-text", use_random_text, "random text features instead of --text");
  text->excludes(random);
  app.add_option("--sample", sample, "sample index (in the dataset, or within the shard)")->capture_default_str();
  app.add_option("--ctxt-key", keys.ctxt, "shard key of the LLM token features")->capture_default_str();
  app.add_option("--ctxt-mask-key", keys.ctxt_mask, "shard key of their mask")->capture_default_str();
  app.add_option("--vtxt-key", keys.vtxt, "shard key of the pooled CLIP feature")->capture_default_str();
  app.add_option("--tokens", tokens, "text tokens of --random-text")->capture_default_str();
  app.add_option("--frames", frames, "motion length in frames (30 fps)")->capture_default_str();
  app.add_option("--num-samples", num_samples, "samples (same text, other noise)")->capture_default_str();
  app.add_option("--steps", steps, "Euler steps")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--guidance-scale", guidance, "classifier-free guidance scale (1 = off; the release uses 5)")
      ->capture_default_str();
  app.add_option("--null-features", null_path, "safetensors with null_vtxt_feat (+ null_ctxt_input) for guidance")
      ->check(CLI::ExistingFile);
  app.add_option("--stats", stats_path, "mean/std file to denormalise the output (default: the dataset's)")
      ->check(CLI::ExistingFile);
  app.add_option("--seed", seed, "noise seed")->capture_default_str();
  app.add_option("--out", out_path, "output file (.npy or .safetensors, key \"motion\")")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  try {
    ZEST_CHECK(use_random_text || !text_path.empty(), "give --text DATASET_DIR|SHARD or --random-text");
    zest::examples::check_output_path(out_path);
    const auto loaded = zest::examples::load_model(model_args, "hymotion");
    auto& model = dynamic_cast<zest::hymotion::HyMotionModel&>(*loaded.module);
    const zest::hymotion::HyMotionConfig& config = model.config();

    torch::Generator text_gen = at::make_generator<at::CPUGeneratorImpl>(seed);  // the noise has its own
    zest::SampleLocation where;
    if (!use_random_text) where = zest::locate_sample(text_path, sample);
    const zest::MotionText one = use_random_text ? zest::random_motion_text(config, tokens, text_gen)
                                                 : zest::read_motion_text(where, keys, config);
    if (stats_path.empty()) stats_path = where.stats;

    zest::MotionPipeline pipeline;
    pipeline.module = loaded.module;
    pipeline.model = &model;
    if (!null_path.empty()) pipeline.release_tensors = zest::read_null_features(null_path);
    pipeline.device = torch::Device(model_args.device);
    pipeline.dtype = zest::examples::parse_dtype(model_args.dtype);
    zest::MotionRequest request;
    request.frames = frames;
    request.steps = steps;
    request.guidance_scale = guidance;
    request.seed = seed;
    request.count = num_samples;
    request.stats = stats_path;
    const torch::Tensor motion = zest::generate_motion(pipeline, one, request);
    if (!stats_path.empty()) std::fprintf(stderr, "denormalised with %s\n", stats_path.c_str());
    zest::examples::write_result(out_path, "motion", motion);
    // Beside it, each sample as a skeleton animation (pipelines/motion_gif.h): NAME.gif, or NAME_<i>.gif for several.
    // Only the released 201-feature representation holds joint positions; other widths (tiny test models) skip it.
    const auto animations = zest::write_motion_animations(out_path.substr(0, out_path.rfind('.')), motion);
    if (animations.empty()) std::fprintf(stderr, "%s\n", zest::missing_animation_note(motion).c_str());
    for (const std::string& gif : animations) std::fprintf(stderr, "wrote %s\n", gif.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "infer_hymotion: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
