// Stable Diffusion's `zest sample` and validation grids (see sd_samples.h).
#include "pipelines/sd_samples.h"

#include "core/check.h"
#include "data/png_write.h"
#include "models/lora_file.h"
#include "models/model_selection.h"
#include "models/unet/prediction.h"
#include "models/unet/scheduler.h"
#include "pipelines/sample_run.h"
#include "pipelines/sd_pipeline.h"

#include <chrono>
#include <cstdio>

namespace zest {
namespace {

namespace fs = std::filesystem;

void sample_pictures(const SampleOptions& args) {
  // Every argument is checked before the pipeline loads, so that a typo costs no loading time.
  ZEST_CHECK(has_suffix(args.output, ".png"), "-o ", args.output, ": the file name must end in .png");
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
  const torch::Device device = sample_device(args.device);
  const torch::Dtype dtype = sample_dtype(args.dtype, device, torch::kHalf);

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

// The pipeline folder validation samples use: `sample.pretrained`, else the model's pretrained folder (a
// pipeline folder, or the pipeline above a unet/ folder). "" when neither names one.
std::string validation_pipeline_folder(const SampleConfig& config, const ModelSelection& model) {
  if (!config.pretrained.empty()) return config.pretrained;
  if (model.pretrained.empty() || !fs::is_directory(model.pretrained)) return "";
  const fs::path folder = fs::path(model.pretrained).lexically_normal();
  if (fs::is_directory(folder / "vae")) return folder.string();
  const fs::path above = folder.has_filename() ? folder.parent_path() : folder.parent_path().parent_path();
  return fs::is_directory(above / "vae") ? above.string() : "";
}

std::string grid_name(int64_t step, size_t prompt) {
  char name[64];
  std::snprintf(name, sizeof(name), "step_%08lld_prompt_%zu.png", static_cast<long long>(step), prompt);
  return name;
}

// A UNet run's validation grids, one per prompt. The pipeline is loaded on the first round and its UNet's
// values replaced on the next: the whole UNet's, or a LoRA run's adapters' (attached to the pipeline's own
// UNet in the first round).
class SdValidation final : public ValidationDrawer {
 public:
  SdValidation(SampleConfig config, const ModelSelection& model, LossConfig loss)
      : config_(std::move(config)), loss_(std::move(loss)), folder_(validation_pipeline_folder(config_, model)) {
    ZEST_CHECK(!folder_.empty(), "[sample] needs a pipeline folder (vae/ text_encoder/ tokenizer/): set "
               "sample.pretrained, or start the model from one with model.pretrained");
    for (const char* part : {"vae", "text_encoder", "tokenizer", "unet"}) {
      ZEST_CHECK(fs::is_directory(fs::path(folder_) / part), "sample.pretrained: ", folder_, " has no ", part,
                 "/ (a Stable Diffusion pipeline folder holds unet/ vae/ text_encoder/ tokenizer/)");
    }
  }

  ValidationFiles draw(const ValidationWeights& weights, const torch::Device& device, int64_t step,
                       const fs::path& folder, nlohmann::json& listed) override {
    const auto dtype = device.is_cuda() ? torch::kHalf : torch::kFloat32;
    if (!pipeline_) {
      load(weights.lora ? WeightsSource{} : WeightsSource{weights.file, "", false}, device, dtype);
      if (weights.lora) load_lora(*pipeline_->unet_module, "unet", weights.file, 1.0);
    } else if (weights.lora) {
      load_lora_values(*pipeline_->unet_module, "unet", weights.file);
    } else {
      load_unet_values(*pipeline_, weights.file);
    }
    SampleRequest request;
    std::tie(request.width, request.height) = parse_image_size(config_.size);
    if (!config_.negative_prompt.empty()) request.negative_prompt = config_.negative_prompt;
    request.steps = config_.steps;
    request.guidance_scale = config_.guidance;
    request.seed = static_cast<uint64_t>(config_.seed);
    request.count = config_.num_images;
    if (!config_.scheduler.empty()) request.scheduler = unet::parse_scheduler_kind(config_.scheduler);
    ValidationFiles written;
    for (size_t i = 0; i < config_.prompts.size(); ++i) {
      request.prompt = config_.prompts[i];
      const auto images = generate_images(*pipeline_, request);
      const fs::path path = folder / grid_name(step, i);
      write_png(path.string(), image_grid(images));
      written.files.push_back(path.string());
      written.pictures_by_prompt.push_back({path.string()});
      listed.push_back({{"prompt", request.prompt}, {"file", (fs::path("samples") / path.filename()).string()}});
    }
    return written;
  }

  std::string file_noun() const override { return "grid"; }

 private:
  SampleConfig config_;
  LossConfig loss_;
  std::string folder_;
  std::unique_ptr<SdPipeline> pipeline_;

  // The pipeline with the UNet's values from `source`, its scheduler predicting what the run's [loss] trains
  // (where [loss] sets the prediction type or zero terminal SNR, rather than the pipeline's scheduler config).
  void load(const WeightsSource& source, const torch::Device& device, torch::Dtype dtype) {
    pipeline_ = std::make_unique<SdPipeline>(load_sd_pipeline(folder_, source, device, dtype));
    if (const auto type = unet::prediction_type_named(loss_.prediction)) pipeline_->scheduler.prediction_type = *type;
    if (loss_.rescale_betas_zero_snr) pipeline_->scheduler.rescale_betas_zero_snr = *loss_.rescale_betas_zero_snr;
  }
};

}  // namespace

FamilyPipeline sd_family_pipeline() {
  FamilyPipeline p;
  p.family = "unet";
  // owns_folder left empty: every folder no other family claims is read as a Stable Diffusion pipeline.
  p.sample = sample_pictures;
  p.validation = [](const SampleConfig& config, const ModelSelection& model, const LossConfig& loss) {
    return std::make_unique<SdValidation>(config, model, loss);
  };
  return p;
}

}  // namespace zest
