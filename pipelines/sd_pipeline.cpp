// Loading a Stable Diffusion pipeline folder and generating pictures (see sd_pipeline.h). The order of
// operations follows diffusers' pipelines, so that a seed gives the reference's pixels.
#include "pipelines/sd_pipeline.h"

#include "formats/safetensors.h"
#include "core/check.h"
#include "core/untrusted_file.h"
#include "formats/json_field.h"
#include "formats/json_text.h"
#include "models/model_resolve.h"
#include "models/pretrained_load.h"
#include "models/pretrained_source.h"
#include "models/pretrained_weights.h"
#include "models/state_dict.h"

#include <ATen/CPUGeneratorImpl.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <regex>

namespace zest {
namespace {

namespace fs = std::filesystem;

constexpr const char* kPipelineLayout =
    "a Stable Diffusion pipeline folder holds unet/ vae/ text_encoder/ tokenizer/ (SDXL also text_encoder_2/ "
    "tokenizer_2/), as diffusers' save_pretrained writes it";

fs::path required_part(const fs::path& folder, const char* part) {
  const fs::path path = folder / part;
  if (!fs::is_directory(path)) ZEST_FAIL(folder.string(), ": has no ", part, "/ (", kPipelineLayout, ")");
  return path;
}

// model_index.json: only "force_zeros_for_empty_prompt" is read (the parts are found by their folders).
// Absent: the default; present: a regular file of valid JSON holding an object, or one message saying what is not.
bool read_force_zeros(const fs::path& path, bool fallback) {
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(path, ec))) return fallback;
  const nlohmann::ordered_json index = read_json_file(path.string(), "pipeline index (model_index.json)");
  const JsonField root = JsonField(index, printable(path.string())).null_as_absent();  // null: the default
  return root.object().at("force_zeros_for_empty_prompt").boolean_or(fallback);
}

// The UNet's architecture from unet/config.json, its values from the chosen source.
void load_unet(SdPipeline& p, const WeightsSource& source) {
  const fs::path dir = required_part(p.folder, "unet");
  const ResolvedModel resolved = resolve_pretrained_folder(dir.string());
  ZEST_CHECK(resolved.family->name == "unet", dir.string(), ": is not a UNet2DConditionModel folder");
  auto module = build_model(resolved);
  p.unet = dynamic_cast<unet::UNet2DConditionModel*>(module.get());
  ZEST_CHECK(p.unet != nullptr, dir.string(), ": did not build a UNet2DConditionModel");
  p.unet_module = module;
  if (source.is_pipeline_folder()) {
    const auto weights = PretrainedWeights::open(find_pretrained_layout(dir.string()));
    load_pretrained_weights(*module, *weights, /*strict=*/true);
  } else {
    load_weights(*module, source);
  }
  module->to(p.device, p.dtype);
  module->eval();
}

void check_widths(const SdPipeline& p) {
  const auto& u = p.unet->config();
  const int64_t context = u.cross_attention_dim.at(0);
  const int64_t text = p.text_encoder->config().hidden_size + (p.is_sdxl() ? p.text_encoder_2->config().hidden_size : 0);
  ZEST_CHECK(context == text, p.folder.string(), ": the text encoders give ", text, " features per token; unet/ expects "
             "cross_attention_dim ", context);
  if (p.is_sdxl()) {
    const int64_t pooled = u.projection_class_embeddings_input_dim - 6 * u.addition_time_embed_dim;
    ZEST_CHECK(pooled == p.text_encoder_2->config().projection_dim, p.folder.string(), ": text_encoder_2/ projects to ",
               p.text_encoder_2->config().projection_dim, "; unet/ expects pooled text of ", pooled);
  }
}

torch::Tensor ids_tensor(const clip::CLIPTokenizer& tokenizer, const std::string& text, int64_t count) {
  const auto ids = tokenizer.encode_padded(text);
  return torch::tensor(ids, torch::kLong).unsqueeze(0).expand({count, -1}).contiguous();
}

// SD1.5: the text encoder's last hidden state. SDXL: both encoders' penultimate states side by side, the
// second encoder's projected pooled output, and the size/crop time ids.
unet::UNetConditioning encode_prompt(SdPipeline& p, const std::string& text, int64_t count, int64_t height,
                                     int64_t width) {
  unet::UNetConditioning c;
  const auto ids = ids_tensor(*p.tokenizer, text, count).to(p.device);
  const auto first = p.text_encoder->forward(ids);
  if (!p.is_sdxl()) {
    c.encoder_hidden_states = first.last_hidden_state.to(p.dtype);
    return c;
  }
  const auto second = p.text_encoder_2->forward(ids_tensor(*p.tokenizer_2, text, count).to(p.device));
  c.encoder_hidden_states = torch::cat({first.penultimate(), second.penultimate()}, -1).to(p.dtype);
  c.text_embeds = second.text_embeds.to(p.dtype);
  const double h = static_cast<double>(height), w = static_cast<double>(width);
  c.time_ids = torch::tensor({h, w, 0.0, 0.0, h, w}, torch::kFloat32).unsqueeze(0).expand({count, 6}).contiguous()
                   .to(p.device, p.dtype);
  return c;
}

unet::UNetConditioning zeros_like(const unet::UNetConditioning& c) {
  return {torch::zeros_like(c.encoder_hidden_states), torch::zeros_like(c.text_embeds), c.time_ids};
}

// diffusers' image processor: (x / 2 + 0.5) clamped to [0, 1], × 255, rounded, uint8; [B, H, W, 3].
torch::Tensor to_pixels(const torch::Tensor& images) {
  const auto unit = (images.to(torch::kFloat32) / 2 + 0.5).clamp(0, 1);
  return (unit * 255).round().to(torch::kUInt8).permute({0, 2, 3, 1}).contiguous().to(torch::kCPU);
}

}  // namespace

int64_t SdPipeline::vae_scale_factor() const {
  return int64_t{1} << (vae->config().block_out_channels.size() - 1);
}

int64_t SdPipeline::size_multiple() const {
  return vae_scale_factor() * (int64_t{1} << (unet->config().levels() - 1));
}

SdPipeline load_sd_pipeline(const fs::path& folder, const WeightsSource& source, torch::Device device,
                            torch::Dtype dtype) {
  ZEST_CHECK(fs::is_directory(folder), folder.string(), ": not a folder (", kPipelineLayout, ")");
  SdPipeline p;
  p.folder = folder;
  p.device = device;
  p.dtype = dtype;
  // Every part's presence and the small JSON files first, so that a wrong folder costs no loading time.
  for (const char* part : {"unet", "vae", "text_encoder", "tokenizer"}) required_part(folder, part);
  p.force_zeros_for_empty_prompt = read_force_zeros(folder / "model_index.json", p.force_zeros_for_empty_prompt);
  const fs::path scheduler = folder / "scheduler" / "scheduler_config.json";
  std::error_code ec;
  p.scheduler = fs::exists(fs::symlink_status(scheduler, ec)) ? unet::SchedulerConfig::from_file(scheduler)
                                                              : unet::SchedulerConfig::stable_diffusion();
  load_unet(p, source);
  const bool sdxl = p.unet->config().text_time_embedding;
  if (sdxl) {
    for (const char* part : {"text_encoder_2", "tokenizer_2"}) {
      if (!fs::is_directory(folder / part)) {
        ZEST_FAIL(folder.string(), ": has no ", part, "/, which an SDXL pipeline (unet/ with addition_embed_type "
                  "\"text_time\") needs (", kPipelineLayout, ")");
      }
    }
  }
  const auto options = torch::TensorOptions().device(device).dtype(dtype);
  p.tokenizer = clip::CLIPTokenizer::from_folder(folder / "tokenizer");
  p.text_encoder = clip::load_clip_text_model(folder / "text_encoder", options);
  if (sdxl) {
    p.tokenizer_2 = clip::CLIPTokenizer::from_folder(folder / "tokenizer_2");
    p.text_encoder_2 = clip::load_clip_text_model(folder / "text_encoder_2", options);
    ZEST_CHECK(p.text_encoder_2->with_projection(), folder.string(), "/text_encoder_2: SDXL needs a "
               "CLIPTextModelWithProjection (its pooled, projected output)");
  }
  p.vae = vae::load_autoencoder_kl(folder / "vae", torch::TensorOptions().device(device).dtype(torch::kFloat32));
  p.vae->to(device, vae::vae_compute_dtype(p.vae->config(), dtype));
  p.text_encoder->eval();
  if (sdxl) p.text_encoder_2->eval();
  p.vae->eval();
  check_widths(p);
  return p;
}

void load_unet_values(SdPipeline& p, const std::string& weights_file) {
  WeightsSource file;
  file.weights_file = weights_file;
  load_weights(*p.unet_module, file);
}

std::pair<int64_t, int64_t> parse_image_size(const std::string& text) {
  static const std::regex pattern("([0-9]{1,6})x([0-9]{1,6})");
  std::smatch m;
  if (!std::regex_match(text, m, pattern) || std::stoll(m[1]) == 0 || std::stoll(m[2]) == 0) {
    ZEST_FAIL("--size '", text, "': expected WIDTHxHEIGHT in pixels, e.g. 512x512");
  }
  return {std::stoll(m[1]), std::stoll(m[2])};
}

torch::Tensor generate_images(SdPipeline& p, const SampleRequest& r) {
  torch::NoGradGuard no_grad;
  const int64_t multiple = p.size_multiple();
  ZEST_CHECK(r.width % multiple == 0 && r.height % multiple == 0, "--size ", r.width, "x", r.height,
             ": width and height must be multiples of ", multiple, " for this pipeline (the VAE's factor ",
             p.vae_scale_factor(), " × the UNet's downsampling)");
  ZEST_CHECK(r.count >= 1 && r.count <= 64, "-n ", r.count, ": expected 1 to 64 images");
  ZEST_CHECK(r.steps >= 1, "--steps ", r.steps, ": expected at least 1");
  const bool guided = r.guidance_scale > 1.0;
  const unet::UNetConditioning cond = encode_prompt(p, r.prompt, r.count, r.height, r.width);
  unet::UNetConditioning uncond;
  if (guided) {
    uncond = p.is_sdxl() && !r.negative_prompt && p.force_zeros_for_empty_prompt
                 ? zeros_like(cond)
                 : encode_prompt(p, r.negative_prompt.value_or(""), r.count, r.height, r.width);
  }
  const auto kind = r.scheduler.value_or(unet::default_scheduler_kind(p.scheduler));
  const auto scheduler = unet::make_scheduler(kind, p.scheduler, r.steps);
  // randn_tensor with a CPU generator: drawn on the CPU in the latents' dtype, then moved.
  auto generator = at::make_generator<at::CPUGeneratorImpl>(r.seed);
  const int64_t f = p.vae_scale_factor();
  const auto noise = torch::randn({r.count, p.unet->config().in_channels, r.height / f, r.width / f}, generator,
                                  torch::TensorOptions().dtype(p.dtype))
                         .to(p.device);
  const auto latents = unet::run_scheduler(
      *scheduler, unet::guided_epsilon(*p.unet, cond, uncond, r.guidance_scale, r.guidance_rescale), noise);
  const auto vae_dtype = vae::vae_compute_dtype(p.vae->config(), p.dtype);
  const auto images = p.vae->decode(p.vae->from_unet_latents(latents.to(vae_dtype)));
  return to_pixels(images);
}

}  // namespace zest
