// Prediction types, their targets and the min-SNR weights (see prediction.h): the arithmetic of diffusers'
// DDPMScheduler.get_velocity and training_utils.compute_snr, in the same dtypes.
#include "models/unet/prediction.h"

#include "core/check.h"

namespace zest::unet {
namespace {

// ᾱ_t per sample on x's device and in x's dtype, shaped [B, 1, ...] to broadcast over x.
torch::Tensor alphas_cumprod_for(const NoiseSchedule& schedule, const torch::Tensor& x, const torch::Tensor& t) {
  ZEST_CHECK(t.dim() == 1 && t.size(0) == x.size(0), "diffusion target: t must be [", x.size(0), "], got ", t.sizes());
  std::vector<int64_t> shape(static_cast<size_t>(x.dim()), 1);
  shape[0] = x.size(0);
  return schedule.alphas_cumprod_on(x.device(), x.scalar_type()).index_select(0, t.to(x.device(), torch::kLong)).view(shape);
}

}  // namespace

const char* to_string(PredictionType type) {
  switch (type) {
    case PredictionType::epsilon: return "epsilon";
    case PredictionType::v_prediction: return "v_prediction";
    case PredictionType::sample: return "sample";
  }
  return "?";
}

std::optional<PredictionType> prediction_type_named(const std::string& name) {
  for (const auto type : {PredictionType::epsilon, PredictionType::v_prediction, PredictionType::sample}) {
    if (name == to_string(type)) return type;
  }
  return std::nullopt;
}

torch::Tensor velocity(const NoiseSchedule& schedule, const torch::Tensor& x0, const torch::Tensor& noise,
                       const torch::Tensor& t) {
  const auto acp = alphas_cumprod_for(schedule, x0, t);
  return acp.pow(0.5) * noise - (1 - acp).pow(0.5) * x0;
}

torch::Tensor prediction_target(PredictionType type, const NoiseSchedule& schedule, const torch::Tensor& x0,
                                const torch::Tensor& noise, const torch::Tensor& t) {
  switch (type) {
    case PredictionType::epsilon: return noise;
    case PredictionType::v_prediction: return velocity(schedule, x0, noise, t);
    case PredictionType::sample: return x0;
  }
  ZEST_FAIL("unknown prediction type");
}

torch::Tensor snr_at(const NoiseSchedule& schedule, const torch::Tensor& t) {
  const auto acp = schedule.alphas_cumprod_on(t.device(), torch::kFloat32);
  const auto index = t.to(torch::kLong);
  const auto alpha = acp.pow(0.5).index_select(0, index);
  const auto sigma = (1.0 - acp).pow(0.5).index_select(0, index);
  return (alpha / sigma).pow(2);
}

torch::Tensor min_snr_weights(PredictionType type, const NoiseSchedule& schedule, const torch::Tensor& t,
                              double gamma) {
  ZEST_CHECK(gamma > 0, "min-SNR weighting needs gamma > 0, got ", gamma);
  const auto snr = snr_at(schedule, t);
  const auto clipped = torch::clamp_max(snr, gamma);  // = stack([snr, γ]).min(dim=1), NaN-free for finite γ
  switch (type) {
    case PredictionType::epsilon: return clipped / snr;
    case PredictionType::v_prediction: return clipped / (snr + 1);
    case PredictionType::sample: return clipped;
  }
  ZEST_FAIL("unknown prediction type");
}

}  // namespace zest::unet
