// Flow-matching loss and Euler sampler for HY-Motion (the sampler mirrors motion_diffusion.py's
// generate(): torchdiffeq's euler over linspace(0, 1, steps + 1), CFG batch laid out [uncond ; cond]).
#include "models/hymotion/flow_matching.h"

#include "core/check.h"

namespace zest::hymotion {

torch::Tensor sample_time(int64_t batch, const TimeSampling& sampling, torch::Generator& generator) {
  const auto opts = torch::TensorOptions().dtype(torch::kFloat32).device(generator.device());
  ZEST_CHECK(0 <= sampling.min_time && sampling.min_time < sampling.max_time && sampling.max_time <= 1,
             "flow time range [", sampling.min_time, ", ", sampling.max_time, ") is not inside [0, 1]");
  ZEST_CHECK(sampling.kind == TimeSampling::Kind::uniform || sampling.std > 0,
             "logit-normal time sampling needs std > 0, got ", sampling.std);
  const auto t = sampling.kind == TimeSampling::Kind::uniform
                     ? torch::rand({batch}, generator, opts)
                     : torch::sigmoid(torch::randn({batch}, generator, opts) * sampling.std + sampling.mean);
  if (sampling.min_time == 0.0 && sampling.max_time == 1.0) return t;  // bit for bit what was drawn
  return sampling.min_time + (sampling.max_time - sampling.min_time) * t;
}

torch::Tensor flow_matching_loss(HyMotionModel& model, const torch::Tensor& x1, const torch::Tensor& ctxt_input,
                                 const torch::Tensor& vtxt_input, const torch::Tensor& x_mask,
                                 const torch::Tensor& ctxt_mask, torch::Generator& generator,
                                 const TimeSampling& sampling, std::shared_ptr<const PackedTokens> packed) {
  ZEST_CHECK(x1.dim() == 3, "flow_matching_loss: x1 must be [B, L, C], got ", x1.sizes());
  const auto t = sample_time(x1.size(0), sampling, generator).to(x1.device());
  const auto noise_opts = x1.options().dtype(torch::kFloat32).device(generator.device());
  const auto noise = torch::randn(x1.sizes(), generator, noise_opts).to(x1.device());
  return flow_matching_loss_at(model, x1, ctxt_input, vtxt_input, x_mask, ctxt_mask, t, noise, std::move(packed));
}

torch::Tensor flow_matching_loss_at(HyMotionModel& model, const torch::Tensor& x1, const torch::Tensor& ctxt_input,
                                    const torch::Tensor& vtxt_input, const torch::Tensor& x_mask,
                                    const torch::Tensor& ctxt_mask, const torch::Tensor& t,
                                    const torch::Tensor& noise, std::shared_ptr<const PackedTokens> packed) {
  ZEST_CHECK(noise.sizes() == x1.sizes(), "flow_matching_loss: noise ", noise.sizes(), " vs x1 ", x1.sizes());
  ZEST_CHECK(t.dim() == 1 && t.size(0) == x1.size(0), "flow_matching_loss: t must be [B], got ", t.sizes());
  const auto data = x1.to(torch::kFloat32);
  const auto tt = t.to(torch::kFloat32).view({-1, 1, 1});
  const auto x_t = (1 - tt) * noise + tt * data;
  const auto target = data - noise;
  // x_t stays float32: the model's first Linear casts it to the compute dtype, as autocast would.
  const auto pred =
      model.forward({x_t, ctxt_input, vtxt_input, t, x_mask, ctxt_mask, /*valid_frames_only=*/true, std::move(packed)});
  const auto valid = x_mask.to(torch::kBool).unsqueeze(-1);  // [B, L, 1]
  // masked_fill (not a multiply) so that a non-finite value in a padded frame cannot leak in.
  const auto sq_err = (pred.to(torch::kFloat32) - target).pow(2).masked_fill(valid.logical_not(), 0.0);
  const auto count = valid.sum().to(torch::kFloat32) * static_cast<double>(x1.size(2));
  return sq_err.sum() / count.clamp_min(1.0);
}

torch::Tensor sample_euler(HyMotionModel& model, const torch::Tensor& noise, const torch::Tensor& ctxt_input,
                           const torch::Tensor& vtxt_input, const torch::Tensor& x_mask,
                           const torch::Tensor& ctxt_mask, int64_t steps, const Guidance& guidance) {
  ZEST_CHECK(steps > 0, "sample_euler: steps must be positive, got ", steps);
  torch::NoGradGuard no_grad;
  const bool guided = guidance.scale > 1.0;
  auto ctxt = ctxt_input, vtxt = vtxt_input, xm = x_mask, cm = ctxt_mask;
  if (guided) {
    ZEST_CHECK(guidance.null_vtxt.defined(), "sample_euler: guidance scale ", guidance.scale,
               " needs null_vtxt");
    const auto null_v = guidance.null_vtxt.to(vtxt.options()).expand(vtxt.sizes());
    const auto null_c =
        guidance.null_ctxt.defined() ? guidance.null_ctxt.to(ctxt.options()).expand(ctxt.sizes()) : ctxt;
    vtxt = torch::cat({null_v, vtxt}, 0);
    ctxt = torch::cat({null_c, ctxt}, 0);
    xm = torch::cat({x_mask, x_mask}, 0);
    cm = torch::cat({ctxt_mask, ctxt_mask}, 0);
  }
  const auto times = torch::linspace(0, 1, steps + 1, noise.options().dtype(torch::kFloat32));
  auto x = noise;
  for (int64_t i = 0; i < steps; ++i) {
    const auto t0 = times[i], dt = times[i + 1] - times[i];
    const auto x_in = guided ? torch::cat({x, x}, 0) : x;
    auto v = model.forward({x_in, ctxt, vtxt, t0.expand({x_in.size(0)}), xm, cm});
    if (guided) {
      const auto halves = v.chunk(2, 0);
      v = halves[0] + guidance.scale * (halves[1] - halves[0]);
    }
    x = x + dt * v;
  }
  return x;
}

}  // namespace zest::hymotion
