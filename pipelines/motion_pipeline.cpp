// Loading a HY-Motion release for sampling and drawing motions from text features (see motion_pipeline.h).
#include "pipelines/motion_pipeline.h"

#include "core/check.h"
#include "core/untrusted_file.h"
#include "formats/safetensors.h"
#include "formats/yaml_subset.h"
#include "models/hymotion/hymotion_model.h"
#include "models/hymotion/release_folder.h"
#include "models/model_memory.h"
#include "models/model_resolve.h"
#include "models/pretrained_load.h"
#include "models/pretrained_source.h"
#include "models/pretrained_weights.h"
#include "pipelines/motion_gif.h"

#include <ATen/CPUGeneratorImpl.h>

namespace zest {
namespace {

using hymotion::HyMotionConfig;

// config.yml's train_pipeline_args.test_cfg.text_guidance_scale (the scale the release samples with), if any.
std::optional<double> release_guidance_scale(const std::string& config_file) {
  const auto entries = read_yaml_entries(read_text_file(config_file, "the release configuration"),
                                                   config_file, {"train_pipeline_args"});
  const auto args = entries.find("train_pipeline_args");
  if (args == entries.end() || !args->is_object()) return std::nullopt;
  const auto test = args->find("test_cfg");
  if (test == args->end() || !test->is_object()) return std::nullopt;
  const auto scale = test->find("text_guidance_scale");
  if (scale == test->end() || !scale->is_number()) return std::nullopt;
  return scale->get<double>();
}

// x·std + mean, mean and std already shaped [features] (each caller checks them, naming their file).
torch::Tensor denormalised(const torch::Tensor& x, const torch::Tensor& mean, const torch::Tensor& std) {
  return x * std.to(x.options()) + mean.to(x.options());
}

torch::Tensor release_tensor(const MotionPipeline& p, const std::string& name, torch::IntArrayRef shape) {
  const auto found = p.release_tensors.find(name);
  if (found == p.release_tensors.end()) return {};
  return reshape_checked(found->second, shape, p.folder.string() + ": latest.ckpt's '" + name + "'").to(torch::kFloat32);
}

}  // namespace

MotionText read_motion_text(const SampleLocation& where, const MotionTextKeys& keys, const HyMotionConfig& config) {
  const std::string& path = where.shard;
  const safetensors::Reader file(path);
  const auto ctxt = read_sample(file, keys.ctxt, where.index, 2);
  ZEST_CHECK(ctxt.dim() == 2 && ctxt.size(1) == config.ctxt_input_dim, path, ": '", keys.ctxt, "' has shape ",
             ctxt.sizes(), "; the model expects [tokens, ", config.ctxt_input_dim, "]");
  MotionText text;
  text.ctxt = ctxt.unsqueeze(0);
  text.ctxt_mask = file.contains(keys.ctxt_mask)
                       ? reshape_checked(read_sample(file, keys.ctxt_mask, where.index, 1), {1, ctxt.size(0)},
                                         path + ": '" + keys.ctxt_mask + "'").to(torch::kBool)
                       : torch::ones({1, ctxt.size(0)}, torch::kBool);
  text.vtxt = reshape_checked(read_sample(file, keys.vtxt, where.index, 1), {1, 1, config.vtxt_input_dim},
                              path + ": '" + keys.vtxt + "'");
  return text;
}

MotionText motion_text_of(const hytext::MotionTextFeatures& features, const hytext::TextEncoderFolders& folders,
                          const HyMotionConfig& config) {
  ZEST_CHECK(features.ctxt.size(2) == config.ctxt_input_dim, printable(folders.qwen.string()), ": Qwen3's hidden size is ",
             features.ctxt.size(2), "; the network takes text tokens of ", config.ctxt_input_dim);
  ZEST_CHECK(features.vtxt.size(1) == config.vtxt_input_dim, printable(folders.clip.string()), ": CLIP's hidden size is ",
             features.vtxt.size(1), "; the network takes a pooled text feature of ", config.vtxt_input_dim);
  const int64_t tokens = features.ctxt.size(1);
  return {features.ctxt.narrow(0, 0, 1), (torch::arange(tokens) < features.ctxt_length[0]).view({1, tokens}),
          features.vtxt.narrow(0, 0, 1).view({1, 1, -1})};
}

MotionText random_motion_text(const HyMotionConfig& config, int64_t tokens, torch::Generator& gen) {
  ZEST_CHECK(tokens > 0 && tokens <= 4096, "--tokens must be between 1 and 4096, got ", tokens);
  return {torch::randn({1, tokens, config.ctxt_input_dim}, gen), torch::ones({1, tokens}, torch::kBool),
          torch::randn({1, 1, config.vtxt_input_dim}, gen)};
}

std::map<std::string, torch::Tensor> read_null_features(const std::string& null_path) {
  const safetensors::Reader file(null_path);
  std::map<std::string, torch::Tensor> features;
  features["null_vtxt_feat"] = read_sample(file, "null_vtxt_feat", 0, 3);
  if (file.contains("null_ctxt_input")) features["null_ctxt_input"] = file.read("null_ctxt_input");
  return features;
}

torch::Tensor denormalise(const torch::Tensor& x, const std::string& stats_path) {
  const safetensors::Reader file(stats_path);
  const int64_t dim = x.size(-1);
  return denormalised(x, reshape_checked(read_sample(file, "mean", 0, 1), {dim}, stats_path + ": 'mean'"),
                      reshape_checked(read_sample(file, "std", 0, 1), {dim}, stats_path + ": 'std'"));
}

MotionPipeline load_motion_pipeline(const std::filesystem::path& folder, const WeightsSource& source,
                                    torch::Device device, torch::Dtype dtype) {
  const PretrainedLayout layout = find_pretrained_layout(folder.string());
  ZEST_CHECK(layout.format == hymotion::release_folder_format().name, folder.string(),
             ": is not a HY-Motion release folder (config.yml + latest.ckpt, as the release ships it)");
  const ResolvedModel resolved = resolve_pretrained_folder(folder.string());
  check_model_fits_device(resolved, device, dtype);
  MotionPipeline p;
  p.folder = folder;
  p.device = device;
  p.dtype = dtype;
  p.module = build_model(resolved);
  p.model = dynamic_cast<hymotion::HyMotionModel*>(p.module.get());
  ZEST_CHECK(p.model != nullptr, folder.string(), ": did not build a HY-Motion network");
  if (source.is_pipeline_folder()) {
    load_pretrained_weights(*p.module, *PretrainedWeights::open(layout), /*strict=*/true);
  } else {
    load_weights(*p.module, source);
  }
  p.release_tensors = hymotion::read_release_pipeline_tensors(layout.weights_file);
  if (const auto scale = release_guidance_scale(layout.config_file)) p.guidance_scale = *scale;
  p.module->to(device, dtype);
  p.module->eval();
  return p;
}

torch::Tensor generate_motion(MotionPipeline& p, const MotionText& text, const MotionRequest& request) {
  const HyMotionConfig& config = p.model->config();
  ZEST_CHECK(request.frames > 0 && request.frames <= 100000, "--frames must be between 1 and 100000, got ", request.frames);
  ZEST_CHECK(request.steps > 0 && request.steps <= 10000, "--steps must be between 1 and 10000, got ", request.steps);
  ZEST_CHECK(request.count > 0 && request.count <= 1024, "-n must be between 1 and 1024, got ", request.count);
  const int64_t n = request.count;
  const auto options = torch::TensorOptions(p.dtype).device(p.device);
  const auto ctxt = text.ctxt.expand({n, -1, -1}).contiguous().to(options);
  const auto vtxt = text.vtxt.expand({n, -1, -1}).contiguous().to(options);
  const auto ctxt_mask = text.ctxt_mask.expand({n, -1}).contiguous().to(p.device);
  const auto x_mask = torch::ones({n, request.frames}, torch::TensorOptions(torch::kBool).device(p.device));

  hymotion::Guidance guidance;
  guidance.scale = request.guidance_scale.value_or(p.guidance_scale);
  guidance.null_vtxt = release_tensor(p, "null_vtxt_feat", {1, 1, config.vtxt_input_dim});
  guidance.null_ctxt = release_tensor(p, "null_ctxt_input", {1, 1, config.ctxt_input_dim});
  if (!guidance.null_vtxt.defined()) guidance.null_vtxt = torch::zeros({1, 1, config.vtxt_input_dim});
  if (!guidance.null_ctxt.defined()) guidance.null_ctxt = torch::zeros({1, 1, config.ctxt_input_dim});

  torch::Generator gen = at::make_generator<at::CPUGeneratorImpl>(request.seed);
  const auto noise = torch::randn({n, request.frames, config.input_dim}, gen).to(options);
  const auto motion =
      hymotion::sample_euler(*p.model, noise, ctxt, vtxt, x_mask, ctxt_mask, request.steps, guidance).to(torch::kCPU, torch::kFloat32);
  if (!request.stats.empty()) return denormalise(motion, request.stats);
  const auto mean = release_tensor(p, "mean", {config.output_dim}), std = release_tensor(p, "std", {config.output_dim});
  return mean.defined() && std.defined() ? denormalised(motion, mean, std) : motion;
}

std::string missing_animation_note(const torch::Tensor& motion) {
  return str("no skeleton animation: the motion has ", motion.size(-1), " features per frame, not the ",
             kMotionFeatures, " of HY-Motion's representation");
}

std::vector<std::string> write_motion_animations(const std::string& stem, const torch::Tensor& motion) {
  std::vector<std::string> written;
  if (motion.dim() != 3 || !holds_joint_positions(motion[0])) return written;
  for (int64_t i = 0; i < motion.size(0); ++i) {
    written.push_back(motion.size(0) == 1 ? stem + ".gif" : stem + "_" + std::to_string(i) + ".gif");
    write_motion_gif(written.back(), motion[i]);
  }
  return written;
}

}  // namespace zest
