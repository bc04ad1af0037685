// HY-Motion samples from text features, as the released pipeline draws them: a release folder's network
// (or trained values for it), its learned null text features for classifier-free guidance and its motion
// mean/std; seeded noise integrated by the flow ODE's Euler steps; the motion denormalised, and a skeleton
// animation per sample to look at (pipelines/motion_gif.h). The text comes as a prompt (encoded by HY-Motion's
// text encoders, models/hy_text) or as cached features (a dataset made for training, or a shard of them).
#pragma once

#include "data/sample_features.h"
#include "engine/unit_module.h"
#include "models/hy_text/hy_text_encoder.h"
#include "models/hymotion/flow_matching.h"
#include "models/hymotion/hymotion_config.h"
#include "pipelines/weights_source.h"

#include <torch/torch.h>

#include <filesystem>
#include <map>
#include <optional>
#include <memory>
#include <string>
#include <vector>

namespace zest {

// Names of the cached text features in a zest.motion.v1 shard (per sample, stacked along a leading dimension).
struct MotionTextKeys {
  std::string ctxt = "text_tokens";     // [tokens, ctxt_input_dim] LLM token features
  std::string ctxt_mask = "text_mask";  // [tokens] bool, true = valid token (absent: all valid)
  std::string vtxt = "text_pooled";     // [vtxt_input_dim] pooled CLIP feature
};

struct MotionText {
  torch::Tensor ctxt;       // [1, tokens, Cc]
  torch::Tensor ctxt_mask;  // [1, tokens] bool
  torch::Tensor vtxt;       // [1, 1, Cv]
};

// One sample's text features, shape-checked against the model (errors name the file and the key).
MotionText read_motion_text(const SampleLocation& where, const MotionTextKeys& keys, const hymotion::HyMotionConfig& config);
// The features of a prompt made by HY-Motion's own text encoders (models/hy_text: Qwen3 + CLIP-L, as the
// release's text pipeline makes them), checked against the model's widths (errors name both folders).
MotionText motion_text_of(const hytext::MotionTextFeatures& features, const hytext::TextEncoderFolders& folders,
                          const hymotion::HyMotionConfig& config);
// Random features of the model's widths (trying a model out without a dataset).
MotionText random_motion_text(const hymotion::HyMotionConfig& config, int64_t tokens, torch::Generator& gen);

// Classifier-free guidance's null condition from a safetensors file: null_vtxt_feat [+ null_ctxt_input]
// (a release's learned features), under those names, for MotionPipeline::release_tensors.
std::map<std::string, torch::Tensor> read_null_features(const std::string& null_path);

// Undoes the per-feature normalisation, x·std + mean, with mean/std read from a statistics file
// (safetensors "mean", "std", each [features of x]; errors name the file).
torch::Tensor denormalise(const torch::Tensor& x, const std::string& stats_path);

struct MotionPipeline {
  std::filesystem::path folder;
  std::shared_ptr<UnitModule> module;  // owns the network
  hymotion::HyMotionModel* model = nullptr;
  // null_vtxt_feat, null_ctxt_input (guidance's null condition; zeros when absent), mean, std (CPU)
  std::map<std::string, torch::Tensor> release_tensors;
  double guidance_scale = 5.0;  // config.yml's test_cfg.text_guidance_scale when it has one
  torch::Device device = torch::kCPU;
  torch::Dtype dtype = torch::kFloat32;
};

// A HY-Motion release folder (config.yml + latest.ckpt) built and loaded strictly, its values from
// `source` (the release's own by default), on `device` in `dtype`.
MotionPipeline load_motion_pipeline(const std::filesystem::path& folder, const WeightsSource& source,
                                    torch::Device device, torch::Dtype dtype);

struct MotionRequest {
  int64_t frames = 180;  // 30 fps
  int64_t steps = 50;
  std::optional<double> guidance_scale;  // unset: the pipeline's own
  uint64_t seed = 0;
  int64_t count = 1;     // samples of the same text, other noise
  std::string stats;     // mean/std file to denormalise with ("": the release's mean/std)
};

// [count, frames, features] float32 on the CPU. The noise is drawn on the CPU from `seed`, so a seed
// gives the same motion on any device.
torch::Tensor generate_motion(MotionPipeline& pipeline, const MotionText& text, const MotionRequest& request);

// One skeleton animation per sample of `motion` [count, frames, F] when F is the released width:
// STEM.gif, or STEM_<i>.gif for several. Returns the files written ({} for other widths).
std::vector<std::string> write_motion_animations(const std::string& stem, const torch::Tensor& motion);
// The line that says why write_motion_animations drew nothing for `motion` (its width is not the released one).
std::string missing_animation_note(const torch::Tensor& motion);

}  // namespace zest
