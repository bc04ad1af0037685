// HY-Motion's `zest sample` and validation motions (see motion_samples.h).
#include "pipelines/motion_samples.h"

#include "checkpoint/output_path.h"
#include "core/check.h"
#include "core/untrusted_file.h"
#include "formats/npy.h"
#include "models/hy_text/hy_text_encoder.h"
#include "models/hymotion/released_format.h"
#include "models/lora_file.h"
#include "models/model_selection.h"
#include "pipelines/motion_gif.h"
#include "pipelines/motion_pipeline.h"
#include "pipelines/sample_run.h"

#include <ATen/CPUGeneratorImpl.h>

#include <chrono>
#include <cstdio>
#include <optional>

namespace zest {
namespace {

namespace fs = std::filesystem;

void sample_motion(const SampleOptions& args) {
  // Every argument is checked before the pipeline loads, so that a typo costs no loading time.
  ZEST_CHECK(has_suffix(args.output, ".npy"), "-o ", args.output, ": a HY-Motion sample is written as .npy (with a "
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
  const torch::Device device = sample_device(args.device);
  const torch::Dtype dtype = sample_dtype(args.dtype, device, torch::kBFloat16);
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

// A HY-Motion run's validation motions: its release folder (config.yml + latest.ckpt) and HY-Motion's text
// encoders, found when the run starts; the prompts are encoded on the first round only.
class MotionValidation final : public ValidationDrawer {
 public:
  MotionValidation(SampleConfig config, const ModelSelection& model) : config_(std::move(config)) {
    release_ = !config_.pretrained.empty() ? config_.pretrained : model.pretrained;
    ZEST_CHECK(!release_.empty() && fs::exists(fs::path(release_) / hymotion::kReleaseConfigName),
               "[sample] of a HY-Motion run needs its release folder (config.yml + latest.ckpt): set sample.pretrained, ",
               "or start the model from it with model.pretrained");
    encoders_ = hytext::find_text_encoders(release_, config_.text_encoders);
  }

  ValidationFiles draw(const ValidationWeights& weights, const torch::Device& device, int64_t step,
                       const fs::path& folder, nlohmann::json& listed) override {
    const torch::Dtype dtype = device.is_cuda() ? torch::kBFloat16 : torch::kFloat32;
    if (!prompt_features_) {  // encoded once; the encoders (Qwen3-8B: 16 GB) are not kept
      const hytext::HyTextEncoder encoder(encoders_, device, dtype);
      prompt_features_ = encoder.encode(config_.prompts);
    }
    // A LoRA run's adapters go on the release's own network, as `zest sample --lora` puts them.
    MotionPipeline pipeline =
        load_motion_pipeline(release_, weights.lora ? WeightsSource{} : WeightsSource{weights.file, "", false}, device, dtype);
    if (weights.lora) load_lora(*pipeline.model, "hymotion", weights.file, 1.0);
    MotionRequest request;
    request.frames = config_.frames;
    request.steps = config_.steps_given ? config_.steps : 50;
    if (config_.guidance_given) request.guidance_scale = config_.guidance;
    request.seed = static_cast<uint64_t>(config_.seed);
    request.count = config_.num_images;
    ValidationFiles written;
    for (size_t i = 0; i < config_.prompts.size(); ++i) {
      const auto k = static_cast<int64_t>(i);
      const hytext::MotionTextFeatures one{prompt_features_->ctxt.narrow(0, k, 1),
                                           prompt_features_->ctxt_length.narrow(0, k, 1),
                                           prompt_features_->vtxt.narrow(0, k, 1)};
      const MotionText text = motion_text_of(one, encoders_, pipeline.model->config());
      const torch::Tensor motion = generate_motion(pipeline, text, request);
      char stem[64];
      std::snprintf(stem, sizeof(stem), "step_%08lld_prompt_%zu", static_cast<long long>(step), i);
      const fs::path npy_path = folder / (std::string(stem) + ".npy");
      checkpoint::write_output_file(npy_path.string(), npy::encode(motion));
      written.files.push_back(npy_path.string());
      nlohmann::json gifs = nlohmann::json::array();
      const std::vector<std::string> animations = write_motion_animations((folder / stem).string(), motion);
      for (const std::string& gif : animations) {
        written.files.push_back(gif);
        gifs.push_back((fs::path("samples") / fs::path(gif).filename()).string());
      }
      written.pictures_by_prompt.push_back(animations);
      listed.push_back({{"prompt", config_.prompts[i]}, {"file", (fs::path("samples") / npy_path.filename()).string()},
                        {"animations", gifs}});
    }
    return written;
  }

  std::string file_noun() const override { return "motion file"; }

 private:
  SampleConfig config_;
  std::string release_;
  hytext::TextEncoderFolders encoders_;
  std::optional<hytext::MotionTextFeatures> prompt_features_;  // every prompt's ctxt, ctxt_length, vtxt
};

}  // namespace

FamilyPipeline motion_family_pipeline() {
  FamilyPipeline p;
  p.family = "hymotion";
  p.owns_folder = [](const fs::path& folder) { return fs::exists(folder / hymotion::kReleaseConfigName); };
  p.sample = sample_motion;
  p.validation = [](const SampleConfig& config, const ModelSelection& model, const LossConfig&) {
    return std::make_unique<MotionValidation>(config, model);
  };
  return p;
}

}  // namespace zest
