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
#include "tools/motion_gif.h"

#include <ATen/CPUGeneratorImpl.h>
#include <CLI/CLI.hpp>
#include <torch/torch.h>

#include <cstdio>
#include <exception>
#include <string>

namespace {

using zest::examples::read_sample;
using zest::examples::reshape_checked;
using zest::hymotion::HyMotionConfig;

// Names of the cached text features in a zest.motion.v1 shard (per sample, stacked along a leading dimension).
struct TextKeys {
  std::string ctxt = "text_tokens";     // [tokens, ctxt_input_dim] LLM token features
  std::string ctxt_mask = "text_mask";  // [tokens] bool, true = valid token (absent: all valid)
  std::string vtxt = "text_pooled";     // [vtxt_input_dim] pooled CLIP feature
};

struct Text {
  torch::Tensor ctxt;       // [1, tokens, Cc]
  torch::Tensor ctxt_mask;  // [1, tokens] bool
  torch::Tensor vtxt;       // [1, 1, Cv]
};

Text read_text(const zest::examples::SampleLocation& where, const TextKeys& keys, const HyMotionConfig& config) {
  const std::string& path = where.shard;
  const int64_t sample = where.index;
  const zest::safetensors::Reader file(path);
  Text text;
  const auto ctxt = read_sample(file, keys.ctxt, sample, 2);
  ZEST_CHECK(ctxt.dim() == 2 && ctxt.size(1) == config.ctxt_input_dim, path, ": '", keys.ctxt, "' has shape ",
             ctxt.sizes(), "; the model expects [tokens, ", config.ctxt_input_dim, "]");
  text.ctxt = ctxt.unsqueeze(0);
  text.ctxt_mask = file.contains(keys.ctxt_mask)
                       ? reshape_checked(read_sample(file, keys.ctxt_mask, sample, 1), {1, ctxt.size(0)},
                                         path + ": '" + keys.ctxt_mask + "'").to(torch::kBool)
                       : torch::ones({1, ctxt.size(0)}, torch::kBool);
  text.vtxt = reshape_checked(read_sample(file, keys.vtxt, sample, 1), {1, 1, config.vtxt_input_dim},
                              path + ": '" + keys.vtxt + "'");
  return text;
}

// Random text features of the right shapes (for trying out a model without a dataset).
Text random_text(const HyMotionConfig& config, int64_t tokens, torch::Generator& gen) {
  return {torch::randn({1, tokens, config.ctxt_input_dim}, gen), torch::ones({1, tokens}, torch::kBool),
          torch::randn({1, 1, config.vtxt_input_dim}, gen)};
}

// Classifier-free guidance's null condition: the learned null_vtxt_feat / null_ctxt_input of the pipeline
// (they are not part of the network's state dict) when a file gives them, else zeros.
zest::hymotion::Guidance guidance_inputs(double scale, const std::string& null_path,
                                         const HyMotionConfig& config) {
  zest::hymotion::Guidance g;
  g.scale = scale;
  if (null_path.empty()) {
    g.null_vtxt = torch::zeros({1, 1, config.vtxt_input_dim});
    g.null_ctxt = torch::zeros({1, 1, config.ctxt_input_dim});
    return g;
  }
  const zest::safetensors::Reader file(null_path);
  g.null_vtxt = reshape_checked(file.read("null_vtxt_feat"), {1, 1, config.vtxt_input_dim},
                                null_path + ": 'null_vtxt_feat'");
  if (file.contains("null_ctxt_input"))
    g.null_ctxt = reshape_checked(file.read("null_ctxt_input"), {1, 1, config.ctxt_input_dim},
                                  null_path + ": 'null_ctxt_input'");
  return g;
}

// Undoes the dataset's per-feature normalisation: x·std + mean (safetensors "mean", "std" [output_dim]).
torch::Tensor denormalise(const torch::Tensor& x, const std::string& stats_path, int64_t dim) {
  const zest::safetensors::Reader file(stats_path);
  const auto mean = reshape_checked(file.read("mean"), {dim}, stats_path + ": 'mean'").to(x.options());
  const auto std = reshape_checked(file.read("std"), {dim}, stats_path + ": 'std'").to(x.options());
  return x * std + mean;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"infer_hymotion: Euler ODE sampling with a merged HY-Motion model"};
  zest::examples::ModelArgs model_args;
  zest::examples::add_model_options(app, model_args);
  std::string text_path, null_path, stats_path, out_path = "motion.npy";
  TextKeys keys;
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
    const HyMotionConfig& config = model.config();

    torch::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
    zest::examples::SampleLocation where;
    if (!use_random_text) where = zest::examples::locate_sample(text_path, sample);
    const Text one = use_random_text ? random_text(config, tokens, gen) : read_text(where, keys, config);
    if (stats_path.empty()) stats_path = where.stats;
    const auto options = model.parameters().front().options();
    const auto device = options.device();
    const auto ctxt = one.ctxt.expand({num_samples, -1, -1}).contiguous().to(options);
    const auto vtxt = one.vtxt.expand({num_samples, -1, -1}).contiguous().to(options);
    const auto ctxt_mask = one.ctxt_mask.expand({num_samples, -1}).contiguous().to(device);
    const auto x_mask = torch::ones({num_samples, frames}, torch::TensorOptions(torch::kBool).device(device));

    // x at t = 0 ~ N(0, I), drawn on the CPU so a seed gives the same motion on any device.
    const auto noise = torch::randn({num_samples, frames, config.input_dim}, gen).to(options);
    const auto guide = guidance_inputs(guidance, null_path, config);
    auto motion = zest::hymotion::sample_euler(model, noise, ctxt, vtxt, x_mask, ctxt_mask, steps, guide)
                      .to(torch::kFloat32);
    if (!stats_path.empty()) {
      motion = denormalise(motion, stats_path, config.output_dim);
      std::fprintf(stderr, "denormalised with %s\n", stats_path.c_str());
    }
    zest::examples::write_result(out_path, "motion", motion);
    // Beside it, each sample as a skeleton animation (tools/motion_gif.h): NAME.gif, or NAME_<i>.gif for several.
    const std::string stem = out_path.substr(0, out_path.rfind('.'));
    for (int64_t i = 0; i < num_samples; ++i) {
      const std::string gif = num_samples == 1 ? stem + ".gif" : stem + "_" + std::to_string(i) + ".gif";
      zest::write_motion_gif(gif, motion[i]);
      std::fprintf(stderr, "wrote %s\n", gif.c_str());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "infer_hymotion: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
