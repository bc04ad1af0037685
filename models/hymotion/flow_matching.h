// HY-Motion's training objective and sampler (docs/models.md 1.10): rectified-flow velocity matching with
// x_t = (1 − t)·noise + t·data over valid frames, and the reference's Euler ODE sampler from t = 0
// (noise) to t = 1 (data) with optional classifier-free guidance.
#pragma once

#include "models/hymotion/hymotion_model.h"

#include <torch/torch.h>

namespace zest::hymotion {

// Distribution of the per-sample flow time t during training (the release does not say which).
struct TimeSampling {
  enum class Kind { uniform, logit_normal };
  Kind kind = Kind::uniform;
  double mean = 0.0;  // logit_normal: t = sigmoid(mean + std·N(0, 1))
  double std = 1.0;
  double min_time = 0.0;  // the drawn t mapped onto [min_time, max_time): t ← min + (max − min)·t
  double max_time = 1.0;  // ([loss] min_time / max_time; the defaults leave t as drawn)
};

// Per-sample flow times t [batch] (float32, on the generator's device).
torch::Tensor sample_time(int64_t batch, const TimeSampling& sampling, torch::Generator& generator);

// MSE between the predicted and the target velocity (data − noise), averaged over valid frames
// (x_mask true) and channels only: padded frames contribute nothing. Draws t and the noise from
// `generator`. x1 [B, L, C] is normalised motion data (any float dtype; x_t, the target and the loss
// are float32 whatever the model's compute dtype). `packed`: the batch's packing made ahead of the step
// (packed_tokens.h's add_packed_tokens), else the model packs the masks itself when the switch is on.
torch::Tensor flow_matching_loss(HyMotionModel& model, const torch::Tensor& x1, const torch::Tensor& ctxt_input,
                                 const torch::Tensor& vtxt_input, const torch::Tensor& x_mask,
                                 const torch::Tensor& ctxt_mask, torch::Generator& generator,
                                 const TimeSampling& sampling = {},
                                 std::shared_ptr<const PackedTokens> packed = nullptr);

// The same loss at given t [B] and noise [B, L, C] (deterministic; used by the sampler-free tests).
torch::Tensor flow_matching_loss_at(HyMotionModel& model, const torch::Tensor& x1, const torch::Tensor& ctxt_input,
                                    const torch::Tensor& vtxt_input, const torch::Tensor& x_mask,
                                    const torch::Tensor& ctxt_mask, const torch::Tensor& t,
                                    const torch::Tensor& noise, std::shared_ptr<const PackedTokens> packed = nullptr);

// Classifier-free guidance: v = v_uncond + scale·(v_cond − v_uncond), applied when scale > 1. The
// unconditional pass replaces vtxt by null_vtxt [1, 1, Cv] and, when given, every text token by
// null_ctxt [1, 1, Cc] (the reference's enable_ctxt_null_feat); the text mask is kept.
struct Guidance {
  double scale = 1.0;
  torch::Tensor null_vtxt;
  torch::Tensor null_ctxt;  // optional
};

// Explicit Euler over t = linspace(0, 1, steps + 1) starting from `noise` (x at t = 0), without grad.
// Returns x at t = 1 [B, L, C].
torch::Tensor sample_euler(HyMotionModel& model, const torch::Tensor& noise, const torch::Tensor& ctxt_input,
                           const torch::Tensor& vtxt_input, const torch::Tensor& x_mask,
                           const torch::Tensor& ctxt_mask, int64_t steps, const Guidance& guidance = {});

}  // namespace zest::hymotion
