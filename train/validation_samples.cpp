// [sample]: reading and checking the table, and drawing the validation grids (see validation_samples.h).
#include "train/validation_samples.h"

#include "checkpoint/merge.h"
#include "comm/communicator.h"
#include "core/check.h"
#include "core/config_reader.h"
#include "core/config_writer.h"
#include "core/field_table.h"
#include "data/png_write.h"
#include "engine/engine.h"
#include "models/lora_file.h"
#include "models/model_selection.h"
#include "formats/npy.h"
#include "checkpoint/output_path.h"
#include "models/hy_text/hy_text_encoder.h"
#include "models/hymotion/released_format.h"
#include "pipelines/motion_pipeline.h"
#include "pipelines/sd_pipeline.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>

namespace zest {
namespace {

namespace fs = std::filesystem;

std::string grid_name(int64_t step, size_t prompt) {
  char name[64];
  std::snprintf(name, sizeof(name), "step_%08lld_prompt_%zu.png", static_cast<long long>(step), prompt);
  return name;
}

}  // namespace

const FieldTable<SampleConfig>& sample_fields() {
  static const FieldTable<SampleConfig> table = [] {
    using C = SampleConfig;
    FieldTable<C> t("sample", "validation samples during training (PNG grids in RUN_DIR/samples/)",
                    {{"validation_prompt", "zest calls it prompts (a list)"},
                     {"validation_steps", "zest calls it every_steps"},
                     {"num_validation_images", "zest calls it num_images"},
                     {"guidance_scale", "zest calls it guidance"},
                     {"num_inference_steps", "zest calls it steps"}});
    t.integer("every_steps", &C::every_steps, "optimizer steps between samples (0: none)")
        .at_least(0, "must be >= 0 (0: no validation samples)");
    t.list("prompts", &C::prompts, "one grid per prompt")
        .check([](const C& c) { return c.every_steps == 0 || !c.prompts.empty(); },
               "needs at least one prompt when every_steps > 0")
        .check_value([](const std::vector<std::string>& prompts) {
          return std::none_of(prompts.begin(), prompts.end(), [](const std::string& p) { return p.empty(); });
        }, "an empty prompt; give the text to draw")
        .reference("the texts to draw (a list; at least one when `every_steps > 0`)");
    t.text("negative_prompt", &C::negative_prompt, "classifier-free guidance's unconditional prompt")
        .reference("classifier-free guidance's unconditional text (\"\" for SD1.5; SDXL then uses zeros, as its pipeline)");
    // Left out when unset: an empty path is not a valid value (the model's pretrained folder is then used).
    t.path("pretrained", &C::pretrained, "pipeline folder (default: the model's pretrained one)")
        .written_when([](const C& c) { return !c.pretrained.empty(); })
        .default_text("\"\"")
        .reference("the pipeline folder (`vae/ text_encoder/ tokenizer/`, SDXL also `text_encoder_2/ tokenizer_2/`); "
                   "\"\" = `model.pretrained`'s folder, or the pipeline above when it names a `unet/`");
    t.integer("steps", &C::steps, "denoising steps").between(1, 1000, "must be in [1, 1000]");
    t.number("guidance", &C::guidance, "classifier-free guidance scale")
        .check_value([](double g) { return g >= 1.0; }, "must be >= 1 (1: no classifier-free guidance)")
        .type("float ≥ 1")
        .reference("classifier-free guidance scale (1: off)");
    t.integer("seed", &C::seed, "seed of the starting noise (the same every time: grids compare across steps)")
        .at_least(0, "must be >= 0");
    t.text("size", &C::size, "WIDTHxHEIGHT in pixels")
        .check(
            [](const C& c) {
              try {
                parse_image_size(c.size);
                return true;
              } catch (const Error&) {
                return false;
              }
            },
            [](const C& c) { return "'" + c.size + "': expected WIDTHxHEIGHT in pixels, e.g. \"512x512\""; })
        .reference("WIDTHxHEIGHT in pixels (multiples of the pipeline's factor, 64 for SD1.5/SDXL)");
    t.integer("num_images", &C::num_images, "pictures per prompt")
        .between(1, 64, "must be in [1, 64]")
        .reference("pictures per prompt (one grid)");
    t.text("scheduler", &C::scheduler, "ddim | euler | dpmpp (\"\": the pipeline's own)")
        .check([](const C& c) { return c.scheduler.empty() || c.scheduler == "ddim" || c.scheduler == "euler" ||
                                       c.scheduler == "dpmpp"; },
               [](const C& c) {
                 return "'" + c.scheduler + "': expected \"ddim\", \"euler\" or \"dpmpp\" (or leave it out: the pipeline's own)";
               })
        .type("\"\" | ddim | euler | dpmpp")
        .reference("`ddim`, `euler` or `dpmpp`; \"\" = the pipeline's scheduler class when it is one of these, else DDIM");
    t.path("text_encoders", &C::text_encoders, "HY-Motion: the folder holding Qwen3-8B/ and clip-vit-large-patch14/")
        .written_when([](const C& c) { return !c.text_encoders.empty(); })
        .default_text("\"\"")
        .reference("HY-Motion runs: the folder holding `Qwen3-8B/` and `clip-vit-large-patch14/`; \"\" = the release's "
                   "`ckpts/` layout around the release folder");
    t.integer("frames", &C::frames, "HY-Motion: motion length in frames (30 fps)")
        .between(1, 100000, "must be in [1, 100000] (motion frames at 30 fps)")
        .reference("HY-Motion runs: motion length in frames (30 fps)");
    // Left out, HY-Motion's steps and guidance are the release's.
    t.rules([](ConfigTable& table, C& c) {
      c.steps_given = table.has("steps");
      c.guidance_given = table.has("guidance");
    });
    return t;
  }();
  return table;
}

SampleConfig SampleConfig::from_toml(ConfigTable& t) { return sample_fields().read(t); }

void to_toml(const SampleConfig& c, ConfigWriter& out) { sample_fields().write(c, out); }

std::string sample_pipeline_folder(const SampleConfig& config, const ModelSelection& model) {
  if (!config.pretrained.empty()) return config.pretrained;
  if (model.pretrained.empty() || !fs::is_directory(model.pretrained)) return "";
  const fs::path folder = fs::path(model.pretrained).lexically_normal();
  if (fs::is_directory(folder / "vae")) return folder.string();
  const fs::path above = folder.has_filename() ? folder.parent_path() : folder.parent_path().parent_path();
  return fs::is_directory(above / "vae") ? above.string() : "";
}

ValidationSamples::ValidationSamples(SampleConfig config, const ModelSelection& model, const std::string& family,
                                     std::string run_dir, LossConfig loss)
    : config_(std::move(config)), loss_(std::move(loss)), run_dir_(std::move(run_dir)) {
  if (config_.every_steps == 0) return;
  if (family == "hymotion") {  // motions from the prompts: the release folder and HY-Motion's text encoders
    motion_ = true;
    pipeline_folder_ = !config_.pretrained.empty() ? config_.pretrained : model.pretrained;
    ZEST_CHECK(!pipeline_folder_.empty() && fs::exists(fs::path(pipeline_folder_) / hymotion::kReleaseConfigName),
               "[sample] of a HY-Motion run needs its release folder (config.yml + latest.ckpt): set sample.pretrained, ",
               "or start the model from it with model.pretrained");
    const hytext::TextEncoderFolders folders = hytext::find_text_encoders(pipeline_folder_, config_.text_encoders);
    text_folders_ = {folders.qwen.string(), folders.clip.string()};
    return;
  }
  ZEST_CHECK(family == "unet", "[sample] draws pictures with a Stable Diffusion pipeline or motions with a HY-Motion "
             "release; this run trains a ", family, " model (remove [sample] or set sample.every_steps = 0)");
  pipeline_folder_ = sample_pipeline_folder(config_, model);
  ZEST_CHECK(!pipeline_folder_.empty(), "[sample] needs a pipeline folder (vae/ text_encoder/ tokenizer/): set "
             "sample.pretrained, or start the model from one with model.pretrained");
  for (const char* part : {"vae", "text_encoder", "tokenizer", "unet"}) {
    ZEST_CHECK(fs::is_directory(fs::path(pipeline_folder_) / part), "sample.pretrained: ", pipeline_folder_,
               " has no ", part, "/ (a Stable Diffusion pipeline folder holds unet/ vae/ text_encoder/ tokenizer/)");
  }
}

ValidationSamples::~ValidationSamples() = default;

void ValidationSamples::use_lora(const LoraRecord& record) { lora_metadata_ = lora_file_metadata("unet", record); }

ValidationFiles ValidationSamples::run(Engine& engine, Communicator& comm, int64_t step,
                                                ProgressReporter& progress) {
  const fs::path folder = fs::path(run_dir_) / "samples";
  const std::string weights = (folder / ".unet_for_samples.safetensors").string();
  checkpoint::MergeOptions merge;
  merge.ema = engine.ema() != nullptr;  // what people ship, as diffusers' scripts sample the EMA
  if (comm.rank() == 0) fs::create_directories(folder);
  comm.barrier();
  const bool is_lora = !lora_metadata_.empty();
  if (is_lora) {  // the adapters, as a LoRA file
    merge.name_prefix = lora_name_prefix("unet");
    merge.extra_metadata = lora_metadata_;
  }
  checkpoint::merge_online(engine, weights, merge);  // every rank gathers; rank 0 writes
  ValidationFiles written;
  if (comm.rank() != 0) return written;
  const auto device = engine.device();
  nlohmann::json listed = nlohmann::json::array();
  if (motion_) {
    written = run_motion(weights, device, step, listed);
    const nlohmann::json record = {{"step", step}, {"validation_samples", listed}, {"ema", merge.ema}};
    progress.record_line(record.dump());
    const size_t count = written.files.size();
    progress.message("validation samples of step " + std::to_string(step) + ": " + std::to_string(count) +
                     " motion file" + (count == 1 ? "" : "s") + " in " + folder.string());
    return written;
  }
  const auto dtype = device.is_cuda() ? torch::kHalf : torch::kFloat32;
  if (is_lora) {
    // The pipeline's own UNet with this step's adapters (reloaded whole: an adapter is attached once).
    pipeline_ = std::make_unique<SdPipeline>(load_sd_pipeline(pipeline_folder_, {}, device, dtype));
    load_lora(*pipeline_->unet_module, "unet", weights, 1.0);
  } else if (!pipeline_) {
    pipeline_ = std::make_unique<SdPipeline>(load_sd_pipeline(pipeline_folder_, {weights, "", false}, device, dtype));
    if (const auto type = unet::prediction_type_named(loss_.prediction)) pipeline_->scheduler.prediction_type = *type;
    if (loss_.rescale_betas_zero_snr) pipeline_->scheduler.rescale_betas_zero_snr = *loss_.rescale_betas_zero_snr;
  } else {
    load_unet_values(*pipeline_, weights);
  }
  fs::remove(weights);
  SampleRequest request;
  std::tie(request.width, request.height) = parse_image_size(config_.size);
  request.negative_prompt = config_.negative_prompt;
  if (config_.negative_prompt.empty()) request.negative_prompt.reset();
  request.steps = config_.steps;
  request.guidance_scale = config_.guidance;
  request.seed = static_cast<uint64_t>(config_.seed);
  request.count = config_.num_images;
  if (!config_.scheduler.empty()) request.scheduler = unet::parse_scheduler_kind(config_.scheduler);
  for (size_t i = 0; i < config_.prompts.size(); ++i) {
    request.prompt = config_.prompts[i];
    const auto images = generate_images(*pipeline_, request);
    const fs::path path = folder / grid_name(step, i);
    write_png(path.string(), image_grid(images));
    written.files.push_back(path.string());
    written.pictures_by_prompt.push_back({path.string()});
    listed.push_back({{"prompt", request.prompt}, {"file", (fs::path("samples") / path.filename()).string()}});
  }
  const nlohmann::json record = {{"step", step}, {"validation_samples", listed}, {"ema", merge.ema}};
  progress.record_line(record.dump());
  const size_t count = written.files.size();
  progress.message("validation samples of step " + std::to_string(step) + ": " + std::to_string(count) + " grid" +
                   (count == 1 ? "" : "s") + " in " + folder.string());
  return written;
}

ValidationFiles ValidationSamples::run_motion(const std::string& weights, const torch::Device& device, int64_t step,
                                              nlohmann::json& listed) {
  const fs::path folder = fs::path(run_dir_) / "samples";
  if (prompt_features_.empty()) {  // the prompts are encoded once; the encoders (Qwen3-8B: 16 GB) are not kept
    const hytext::HyTextEncoder encoder({text_folders_[0], text_folders_[1]}, device,
                                        device.is_cuda() ? torch::kBFloat16 : torch::kFloat32);
    const hytext::MotionTextFeatures f = encoder.encode(config_.prompts);
    prompt_features_ = {f.ctxt, f.ctxt_length, f.vtxt};
  }
  MotionPipeline pipeline = load_motion_pipeline(pipeline_folder_, {weights, "", false}, device,
                                                 device.is_cuda() ? torch::kBFloat16 : torch::kFloat32);
  fs::remove(weights);
  MotionRequest request;
  request.frames = config_.frames;
  request.steps = config_.steps_given ? config_.steps : 50;
  if (config_.guidance_given) request.guidance_scale = config_.guidance;
  request.seed = static_cast<uint64_t>(config_.seed);
  request.count = config_.num_images;
  ValidationFiles written;
  for (size_t i = 0; i < config_.prompts.size(); ++i) {
    const auto k = static_cast<int64_t>(i);
    const hytext::MotionTextFeatures one{prompt_features_[0].narrow(0, k, 1), prompt_features_[1].narrow(0, k, 1),
                                         prompt_features_[2].narrow(0, k, 1)};
    const MotionText text = motion_text_of(one, {text_folders_[0], text_folders_[1]}, pipeline.model->config());
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

}  // namespace zest
